package hints

import (
	"time"

	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/agentctx"
)

// Phase and Lifecycle are admission control's program state, which is what
// the policies follow (the scheduler's WatchPrograms stream carries it; the
// replay hands it over directly): one vocabulary, no mapping between them.
type (
	Phase     = admission.Phase
	Lifecycle = admission.Lifecycle
)

const (
	PhaseUnknown   Phase = 0
	PhaseReasoning       = admission.Reasoning
	PhaseActing          = admission.Acting

	LifecycleUnknown    Lifecycle = 0
	LifecycleActive               = admission.Active
	LifecyclePaused               = admission.Paused
	LifecycleTerminated           = admission.Terminated
)

// Program is one lifecycle observation of an agent session.
type Program struct {
	Session    string
	Parent     string // parent session of a sub-agent
	Phase      Phase
	Lifecycle  Lifecycle
	Worker     string // empty when paused or not placed
	PhaseSince time.Time
}

// ProgramOf is what the policies observe of an admission-control program:
// the one mapping from program state to hint input, used by the replay on
// admission's events and by the emitter on the scheduler's (decoded from the
// wire into admission.Program first).
func ProgramOf(p admission.Program) Program {
	return Program{Session: agentctx.Scope(p.Key.Tenant, p.Key.SessionID), Parent: agentctx.Scope(p.Key.Tenant, p.ParentSessionID),
		Phase: p.Phase, Lifecycle: p.Lifecycle,
		Worker: p.Worker, PhaseSince: p.PhaseSince}
}

// program is the engine's record of one program: what it was last seen
// doing and what this emitter did about its KV. The fields below the
// lifecycle ones are shared by the policies (a demote sets demotedOn, the
// prefetch that undoes it clears it); what only one policy needs, that
// policy keeps itself.
type program struct {
	Program
	lastWorker  string // the last worker it was placed on
	lastSeen    time.Time
	actingSince time.Time
	// demotedOn is the worker this emitter demoted the session on and has
	// not prefetched back yet ("" if none).
	demotedOn string
	// toolCallDone: this tool call's KV was dealt with (demoted, or brought
	// back), so it needs no (second) demote.
	toolCallDone bool
	resumed      bool // PAUSED → ACTIVE since the demote
}

// observe records one lifecycle change of the program at now, and the tool
// call it ends in tools (nil: none is timed).
func (st *program) observe(now time.Time, p Program, tools *toolTimes) {
	prev := st.Program
	st.lastSeen = now
	since := p.PhaseSince
	if since.IsZero() || since.After(now) {
		since = now
	}
	if prev.Phase == PhaseActing && p.Phase != PhaseActing && !st.actingSince.IsZero() {
		// A tool call ended: its length teaches what "long" means.
		if tools != nil {
			tools.add(now.Sub(st.actingSince))
		}
		st.actingSince = time.Time{}
	}
	if p.Phase == PhaseActing && (prev.Phase != PhaseActing || st.actingSince.IsZero()) {
		st.actingSince = since
		st.toolCallDone = false
	}
	if prev.Lifecycle == LifecyclePaused && p.Lifecycle == LifecycleActive {
		st.resumed = true
	}
	if p.Worker != "" {
		st.lastWorker = p.Worker
	}
	st.Program = p
}
