package admission

import (
	"fmt"
	"math"
	"time"
)

// Config holds ThunderAgent's knobs with the defaults of dynamo.md §4.
type Config struct {
	// PauseThreshold: a worker is over when used > capacity·threshold, or
	// REASONING programs > max programs·threshold.
	PauseThreshold float64
	// PauseTarget: pausing sheds until used ≤ capacity·target.
	PauseTarget float64
	// SoftDemoteThreshold: from here up to PauseThreshold (on the larger of
	// token and count utilization), a worker's programs are soft-demoted.
	SoftDemoteThreshold float64
	// SoftDemotePriorityJump is added to the priority of a soft-demoted
	// program's requests (seconds of queue position; negative = later).
	SoftDemotePriorityJump float64
	// ResumeHysteresis: resume packs up to capacity·(threshold − hysteresis).
	ResumeHysteresis float64
	// ReplicaResumeMargin: on a worker shared among scheduler replicas
	// (SetShares), resume packs up to a further this much below the
	// ceiling. Each replica resumes on the others' use as last heard, which
	// leaves out what they resume and admit in the same moment: without a
	// margin three replicas hit less than one scheduler (with it they still
	// evict more; docs/scale-out.md).
	ReplicaResumeMargin float64
	// ResumePriorityBoost is the priority jump of the first request after a
	// resume.
	ResumePriorityBoost float64
	// ResumeTimeout: a program paused this long is resumed onto the least
	// loaded worker whatever the room.
	ResumeTimeout time.Duration
	// ActingTokenWeight scales ACTING programs' tokens on the pause side.
	ActingTokenWeight float64
	// ActingDecayTau: on the resume side an ACTING program's tokens decay as
	// 2^(−acting time/tau) (the longer a tool runs, the likelier its KV is
	// reclaimable); 0: they count whole.
	ActingDecayTau time.Duration
	// TickInterval is how often the service calls Tick; soft demotions last
	// 1.5 intervals.
	TickInterval time.Duration
	// BufferPerProgram is the tokens reserved per ACTIVE program on top of
	// its working set.
	BufferPerProgram int64
	// IdleTTL releases ACTING programs idle this long with nothing in flight
	// or waiting; 0 disables.
	IdleTTL time.Duration
	// TerminatedRetention keeps TERMINATED programs readable (GetProgram,
	// ListPrograms) this long before they are dropped.
	TerminatedRetention time.Duration

	// The knobs below are Switchyard's departures from ThunderAgent, on by
	// default; ThunderAgentConfig switches them off. docs/results.md's
	// tuning section measures each on the tune half of the sessions.

	// ResumeOnLastWorker resumes a paused program on the worker it last ran
	// on whenever that worker has the headroom, instead of on the worker
	// with the most headroom: only there is its prefix likely still cached,
	// anywhere else the resume costs a full re-prefill.
	ResumeOnLastWorker bool
	// ResumeOversized resumes a program whose working set exceeds a worker's
	// pause target (a context near the engine's limit) once some worker has
	// a pause target's worth of headroom; ThunderAgent waits for
	// ResumeTimeout, as such a program never fits below the resume ceiling.
	ResumeOversized bool
	// CapacityTiers is how many KV tiers, from the device down, count as a
	// worker's capacity (Capacity.Tokens is built with CountedTokens): 1 =
	// GPU memory only, 0 = every tier, as ThunderAgent counts native
	// offloading. Counting only the GPU keeps the programs in flight within
	// it, and the lower tiers hold what paused programs leave behind (the
	// demote-on-pause and prefetch-on-resume hints move it on purpose).
	CapacityTiers int
	// PauseOrder is which ACTING programs the pause step sheds first.
	PauseOrder PauseOrder
	// ResumeOrder is which paused programs resume first.
	ResumeOrder ResumeOrder
	// MaxWait bounds a waiting turn's wait: a program paused this long with
	// a turn waiting is resumed on its last worker (the least loaded when it
	// has none) whatever the room, and the tick's pause step then sheds
	// others around it. 0 leaves only ResumeTimeout.
	MaxWait time.Duration
	// ReadmitOnGrowth: a turn of a placed program whose prompt grew past
	// its worker's headroom is a new admission decision — the program
	// pauses, and the next tick resumes it where it fits (its own worker
	// first when ResumeOnLastWorker) — instead of running over capacity.
	ReadmitOnGrowth bool
	// ShedBacklog turns new sessions away (Verdict Shed, to be retried after
	// ShedRetryAfter) while the PAUSED programs' tokens exceed this multiple
	// of the fleet's counted capacity: more working sets than pausing can
	// absorb. 0 never sheds.
	ShedBacklog    float64
	ShedRetryAfter time.Duration
	// DefaultGap is the tool gap the gap model predicts before it has
	// seen one.
	DefaultGap time.Duration

	// ColdLane is how many turns of PAUSED programs may run at once on each
	// worker without resuming them: cold, after every ACTIVE program's
	// turn in the engine's queue and with nothing of theirs retained, so
	// that the GPUs keep computing while the ACTIVE programs' working sets
	// stay resident. 0: a paused program's turn waits for its resume
	// (ThunderAgent). A waiting turn takes a freed slot oldest first. A
	// soft-demote band's negative jump would put resident turns behind
	// cold ones: DefaultConfig has none.
	ColdLane int
	// ResidentRetention asks the engine to keep what an ACTIVE program's
	// turn caches ahead of unretained blocks in its eviction order for this
	// long after the turn (SGLang's retention_seconds, vLLM's retention
	// directives; the engine shim drops it, counted, where the engine has
	// neither). 0 retains nothing. The engine keeps it for the whole time:
	// a program paused meanwhile stays protected until it runs out.
	ResidentRetention time.Duration
	// RotateAfter: while turns wait, the tick pauses an ACTING program
	// away longer than this, so that a program whose tool runs long gives
	// its place to one that is waiting. 0 never.
	RotateAfter time.Duration
	// HeldFromIndex: an idle (ACTING) program counts as holding what the KV
	// index says is still resident of its latest prompt on its worker, in
	// the tiers CapacityTiers counts (Controller.Observe), instead of its
	// whole working set. The shells ask the index at every tick
	// (turns.Pipeline.Holdings); an engine that evicted a program's KV no
	// longer has it counted.
	HeldFromIndex bool
}

// PauseOrder says which ACTING programs a worker over its threshold sheds
// first.
type PauseOrder uint8

const (
	// PauseSmallest sheds the smallest first (ThunderAgent: the cheapest to
	// recompute).
	PauseSmallest PauseOrder = iota
	// PauseLatestReturn sheds first the program the gap model expects back
	// last: its KV would sit idle longest, and whoever returns sooner keeps
	// theirs.
	PauseLatestReturn
)

// ResumeOrder says which paused programs the resume step takes first.
type ResumeOrder uint8

const (
	// ResumeSmallest takes the smallest first within a group (ThunderAgent's
	// best-fit decreasing): large programs can wait until ResumeTimeout.
	ResumeSmallest ResumeOrder = iota
	// ResumeOldest takes the longest paused first within a group: no
	// waiting turn is overtaken indefinitely.
	ResumeOldest
	// ResumeDensest takes first, within a group, the program whose
	// residency buys the most turns per token of KV: the smallest working
	// set times its typical turn cycle (the tool gap learned online plus a
	// turn's time).
	ResumeDensest
)

// CountedTokens is the capacity admission packs against, from a worker's
// KV tokens per tier (device first).
func (c Config) CountedTokens(tierTokens ...int64) int64 {
	if n := c.CapacityTiers; n > 0 && n < len(tierTokens) {
		tierTokens = tierTokens[:n]
	}
	var sum int64
	for _, t := range tierTokens {
		sum += t
	}
	return sum
}

// DefaultConfig returns Switchyard's admission: ThunderAgent's timings
// (dynamo.md §4) around a resident set whose KV the engines keep. The
// ACTIVE programs' working sets, idle ones counted by what the KV index
// says they still hold, stay within the workers' KV (every tier counted),
// their turns ask the engine to retain
// what they cache, and the paused programs' turns run in a cold lane
// beside them instead of waiting; a program away past RotateAfter while
// turns wait gives its place up. Each departure from ThunderAgent was
// chosen on the tune half (docs/results.md's tuning section;
// docs/admission.md says what each does).
func DefaultConfig() Config {
	c := ThunderAgentConfig()
	c.ResumeOnLastWorker = true
	c.ResumeOversized = true
	// The resident set counts every tier, as ThunderAgent: what the GPU
	// evicts of a resident program's retained KV lands in host memory and
	// comes back over PCIe, far cheaper than a re-prefill (with a host tier
	// of 4x the GPU KV, counting the GPU only scored far lower on the tune
	// half past what the tiers hold).
	c.CapacityTiers = 0
	// The resident set: idle programs count at full weight on both sides
	// (their KV is retained, so it really is held; HeldFromIndex, below,
	// counts what the engine kept), up to 0.85 of the counted KV —
	// room for the cold lane's turns, which the lane bounds in number, not
	// in tokens — resumed up to 0.80.
	c.ActingTokenWeight = 1
	c.ActingDecayTau = 0
	c.PauseThreshold, c.PauseTarget, c.ResumeHysteresis = 0.85, 0.80, 0.05
	// Chosen on the tune half (12 seeds, three replicas heard 100 ms late,
	// the overloaded level): hit rate −2.8 % of one scheduler's with no
	// margin, +0.7 % with 0.03 (a pause threshold 0.02 lower instead: −0.3 %).
	c.ReplicaResumeMargin = 0.03
	// No soft-demote band: its jump would put resident programs' turns
	// behind the cold lane's.
	c.SoftDemoteThreshold = c.PauseThreshold
	c.ColdLane = 1
	c.ResidentRetention = 5 * time.Minute
	c.RotateAfter = 30 * time.Second
	// A full worker pauses first the program the tool gaps learned online
	// expect back last (on the tune half a hair above ThunderAgent's
	// smallest first, a tie); paused programs resume oldest first, so no
	// waiting turn is overtaken indefinitely. The wait bound, re-admission
	// on growth and shedding are there to be switched on.
	c.PauseOrder = PauseLatestReturn
	c.ResumeOrder = ResumeOldest
	// An idle program counts what the KV index says it still holds on its
	// worker (the working set whole while all of it is there): on the tune
	// half a tie with counting working sets whole at every level, ahead by
	// the tuning rule's score, and what an engine that evicted a program's
	// KV anyway really holds.
	c.HeldFromIndex = true
	return c
}

// ThunderAgentConfig returns ThunderAgent's policy as dynamo.md §4 describes
// it, every default included.
func ThunderAgentConfig() Config {
	return Config{
		PauseThreshold:         0.95,
		PauseTarget:            0.80,
		SoftDemoteThreshold:    0.80,
		SoftDemotePriorityJump: -2.0,
		ResumeHysteresis:       0.10,
		ResumePriorityBoost:    1.0,
		ResumeTimeout:          30 * time.Minute,
		ActingTokenWeight:      1.0,
		ActingDecayTau:         time.Second,
		TickInterval:           5 * time.Second,
		BufferPerProgram:       100,
		IdleTTL:                600 * time.Second,
		TerminatedRetention:    time.Minute,
		ShedRetryAfter:         10 * time.Second,
		DefaultGap:             10 * time.Second,
	}
}

// ResumeCeiling is the utilization resume packs up to on a worker of one
// scheduler's (0.80 by default); a worker shared among replicas has
// ReplicaResumeMargin less (Controller.resumeCeiling).
func (c Config) ResumeCeiling() float64 { return c.PauseThreshold - c.ResumeHysteresis }

// Validate reports a configuration that cannot work, naming the offending
// knob by its flag (RegisterFlags). The timing knobs the shells name their
// own way (the tick interval, the idle TTL, the retention) are named in
// words: a shell checks them first under its own flag names.
func (c Config) Validate() error {
	// NaN passes every comparison below as if it were in range.
	for _, f := range []struct {
		flag string
		v    float64
	}{{"--pause-threshold", c.PauseThreshold}, {"--pause-target", c.PauseTarget}, {"--soft-demote-threshold", c.SoftDemoteThreshold},
		{"--soft-demote-priority-jump", c.SoftDemotePriorityJump}, {"--resume-hysteresis", c.ResumeHysteresis},
		{"--replica-resume-margin", c.ReplicaResumeMargin}, {"--resume-priority-boost", c.ResumePriorityBoost},
		{"--acting-token-weight", c.ActingTokenWeight}, {"--shed-backlog", c.ShedBacklog}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return fmt.Errorf("%s %v: must be a finite number", f.flag, f.v)
		}
	}
	switch {
	case c.PauseThreshold <= 0:
		return fmt.Errorf("--pause-threshold %v: must be positive", c.PauseThreshold)
	case c.PauseTarget <= 0 || c.PauseTarget > c.PauseThreshold:
		return fmt.Errorf("--pause-target %v: must be in (0, --pause-threshold %v]", c.PauseTarget, c.PauseThreshold)
	case c.SoftDemoteThreshold < 0 || c.SoftDemoteThreshold > c.PauseThreshold:
		return fmt.Errorf("--soft-demote-threshold %v: must be in [0, --pause-threshold %v]", c.SoftDemoteThreshold, c.PauseThreshold)
	case c.ResumeHysteresis < 0 || c.ResumeHysteresis >= c.PauseThreshold:
		return fmt.Errorf("--resume-hysteresis %v: must be in [0, --pause-threshold %v)", c.ResumeHysteresis, c.PauseThreshold)
	case c.ReplicaResumeMargin < 0 || c.ReplicaResumeMargin >= c.ResumeCeiling():
		return fmt.Errorf("--replica-resume-margin %v: must be in [0, %v), the pause threshold less the resume hysteresis", c.ReplicaResumeMargin, c.ResumeCeiling())
	case c.ResumeTimeout <= 0:
		return fmt.Errorf("--resume-timeout %v: must be positive", c.ResumeTimeout)
	case c.TickInterval <= 0:
		return fmt.Errorf("admission: tick interval %v must be positive", c.TickInterval)
	case c.IdleTTL < 0:
		return fmt.Errorf("admission: idle TTL %v must not be negative", c.IdleTTL)
	case c.TerminatedRetention < 0:
		return fmt.Errorf("admission: terminated retention %v must not be negative", c.TerminatedRetention)
	case c.ShedBacklog > 0 && c.ShedRetryAfter <= 0:
		return fmt.Errorf("--shed-retry-after %v: must be positive while --shed-backlog is set", c.ShedRetryAfter)
	}
	for _, f := range []struct {
		flag     string
		v        any
		negative bool
	}{{"--acting-token-weight", c.ActingTokenWeight, c.ActingTokenWeight < 0},
		{"--acting-decay-tau", c.ActingDecayTau, c.ActingDecayTau < 0},
		{"--admission-tiers", c.CapacityTiers, c.CapacityTiers < 0},
		{"--buffer-per-program", c.BufferPerProgram, c.BufferPerProgram < 0},
		{"--max-wait", c.MaxWait, c.MaxWait < 0},
		{"--shed-backlog", c.ShedBacklog, c.ShedBacklog < 0},
		{"--shed-retry-after", c.ShedRetryAfter, c.ShedRetryAfter < 0},
		{"--default-tool-gap", c.DefaultGap, c.DefaultGap < 0},
		{"--cold-lane", c.ColdLane, c.ColdLane < 0},
		{"--resident-retention", c.ResidentRetention, c.ResidentRetention < 0},
		{"--rotate-after", c.RotateAfter, c.RotateAfter < 0}} {
		if f.negative {
			return fmt.Errorf("%s %v: must not be negative", f.flag, f.v)
		}
	}
	return nil
}

var pauseOrders = map[PauseOrder]string{PauseSmallest: "smallest", PauseLatestReturn: "latest-return"}

var resumeOrders = map[ResumeOrder]string{ResumeSmallest: "smallest", ResumeOldest: "oldest", ResumeDensest: "densest"}

func (o PauseOrder) String() string  { return pauseOrders[o] }
func (o ResumeOrder) String() string { return resumeOrders[o] }

// Set parses a flag value (smallest, latest-return).
func (o *PauseOrder) Set(s string) error { return setOrder(o, pauseOrders, s, "pause") }

// Set parses a flag value (smallest, oldest, densest).
func (o *ResumeOrder) Set(s string) error { return setOrder(o, resumeOrders, s, "resume") }

func setOrder[T comparable](o *T, names map[T]string, s, what string) error {
	for v, name := range names {
		if name == s {
			*o = v
			return nil
		}
	}
	return fmt.Errorf("admission: unknown %s order %q", what, s)
}
