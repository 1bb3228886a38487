package replay

import (
	"slices"
	"time"

	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/routing"
	"switchyard.dev/pkg/turns"
)

// CallOp names a call a run makes into a scheduling pipeline.
type CallOp string

const (
	CallAdmit       CallOp = "admit"
	CallPlace       CallOp = "place"
	CallPrefillDone CallOp = "prefill_done"
	CallFinish      CallOp = "finish"
	CallEndSession  CallOp = "end_session"
	CallHeld        CallOp = "held"
	CallTick        CallOp = "tick"
)

// Call is one call a run made into its scheduling pipeline (turns.Pipeline)
// with what the run's shell handed it and what it answered. Config.Calls
// receives them in the order they were made: a record of the decisions a
// replay made and of the world they were made in (each worker's load and
// overlap, what the index said idle programs hold), from which a test
// drives the live scheduler through the same sequence.
type Call struct {
	Op      CallOp
	At      time.Time
	Replica int // the scheduler replica whose pipeline was called
	// Turn: Admit and Place. Anchors are set on Place only, as the shell
	// sets them once admitted.
	Turn turns.Turn
	// Woken (Admit): a turn admission had told to wait, asking again.
	Woken bool
	// Admission is Admit's answer.
	Admission admission.Admission
	// Hashes are the prompt's block hashes; Candidates every worker with
	// its load and overlap, as the shell built them (Place).
	Hashes     []kv.BlockHash
	Candidates []routing.Candidate
	Placement  turns.Placement
	// RequestID and Key: PrefillDone, Finish (Key also EndSession); Ended:
	// Finish.
	RequestID string
	Key       admission.Key
	Ended     turns.Ended
	// Query and Answer: Held, one per idle program before its replica's
	// Tick.
	Query  turns.HoldingQuery
	Answer turns.HoldingAnswer
	// Events are what admission control reported of the programs
	// (Finish, EndSession, Tick).
	Events []admission.Event
	// Others is what the other scheduler replicas' programs use on each
	// worker as this replica heard it when it decided (Admit, Tick; nil
	// with one replica).
	Others map[string]admission.Use
}

// record hands c to Config.Calls, copying what the shell reuses; the
// shell calls it only when recording.
func (s *sim) record(c Call) {
	c.At = s.at()
	c.Hashes = slices.Clone(c.Hashes)
	c.Candidates = slices.Clone(c.Candidates)
	c.Placement.Scores = slices.Clone(c.Placement.Scores) // the router's scratch
	c.Events = slices.Clone(c.Events)
	s.cfg.Calls(c)
}

// recording reports whether the run records its calls: only then does the
// shell build them.
func (s *sim) recording() bool { return s.cfg.Calls != nil }
