package console

import "time"

// The document the page draws (GET /console/state, and each "event: state"
// of /console/events): the frontend fills it from the scheduler replicas
// and the hint emitter, and the page reads nothing else. Numbers a report
// does not give are null.

type State struct {
	Tenant            string    `json:"tenant"`
	At                time.Time `json:"at"`
	SchedulersMissing uint32    `json:"schedulersMissing"`
	Workers           []Worker  `json:"workers"`
	// LeaseTTLS is the lease a heartbeat renews, in seconds (0: not
	// said): a worker whose lease ends much sooner missed heartbeats.
	LeaseTTLS float64   `json:"leaseTtlS"`
	Sessions  []Session `json:"sessions"`
	Cache     Cache     `json:"cache"`
	// Hints are the fleet's, in an operator's view only (a tenant's key
	// sees none: they name other tenants' sessions); nil also without a
	// hint emitter (--kvhint-emitter-addr) or while it does not answer.
	Hints *Hints `json:"hints"`
}

// Hints are the hints the emitter sent and what the engines did.
type Hints struct {
	Sent        uint64       `json:"sent"`
	Accepted    uint64       `json:"accepted"`
	Clipped     uint64       `json:"clipped"`
	Deferred    uint64       `json:"deferred"`
	Rejected    uint64       `json:"rejected"`
	Throttled   uint64       `json:"throttled"`
	Errors      uint64       `json:"errors"`
	Unsupported uint64       `json:"unsupported"`
	Recent      []HintRecent `json:"recent"`
}

// HintRecent is one hint sent and what its engine did.
type HintRecent struct {
	At       time.Time `json:"at"`
	WorkerID string    `json:"workerId"`
	Policy   string    `json:"policy"`
	Action   string    `json:"action"`
	Result   string    `json:"result"`
	Reason   string    `json:"reason"`
}

// Worker is one worker: its lease, load, KV per tier and programs.
type Worker struct {
	ID             string    `json:"id"`
	Address        string    `json:"address"`
	Engine         string    `json:"engine"`
	Model          string    `json:"model"`
	LeaseExpiresAt time.Time `json:"leaseExpiresAt"`
	Running        uint32    `json:"running"`
	Waiting        uint32    `json:"waiting"`
	PrefixHitRate  float64   `json:"prefixHitRate"`
	// Since the engine started: requests preempted, device blocks evicted
	// and prompt tokens computed again after a preemption (the last two
	// nil where the engine does not say).
	Preemptions       uint64   `json:"preemptions"`
	EvictedBlocks     *uint64  `json:"evictedBlocks"`
	RePrefilledTokens *uint64  `json:"rePrefilledTokens"`
	KV                []Tier   `json:"kv"`
	Programs          Programs `json:"programs"`
}

// Tier is a worker's KV on one tier; UsedBlocks is nil where no
// report says it (an offload tier of an engine that does not report it;
// the shared pool, whose use the frontend does not ask).
type Tier struct {
	Tier        string  `json:"tier"`
	UsedBlocks  *uint64 `json:"usedBlocks"`
	TotalBlocks uint64  `json:"totalBlocks"`
}

// Programs counts a worker's admission programs by state, with their
// tokens.
type Programs struct {
	ReasoningActive int    `json:"reasoningActive"`
	ReasoningPaused int    `json:"reasoningPaused"`
	ActingActive    int    `json:"actingActive"`
	ActingPaused    int    `json:"actingPaused"`
	Tokens          uint64 `json:"tokens"`
}

// Session is one session with its program and latest turns.
type Session struct {
	Tenant            string    `json:"tenant"`
	SessionID         string    `json:"sessionId"`
	ParentSessionID   string    `json:"parentSessionId"`
	Harness           string    `json:"harness"`
	Turns             uint32    `json:"turns"`
	PromptTokens      uint64    `json:"promptTokens"`
	CachedTokens      uint64    `json:"cachedTokens"`
	IdealCachedTokens uint64    `json:"idealCachedTokens"`
	CompletionTokens  uint64    `json:"completionTokens"`
	LastWorkerID      string    `json:"lastWorkerId"`
	FirstSeen         time.Time `json:"firstSeen"`
	LastSeen          time.Time `json:"lastSeen"`
	Program           *Program  `json:"program"`
	// Admissions are the latest admission decisions about its program
	// (pauses and resumes, with their reasons), oldest first.
	Admissions  []Admission `json:"admissions"`
	RecentTurns []Turn      `json:"recentTurns"`
}

// Program is a session's admission program.
type Program struct {
	Phase        string  `json:"phase"`
	Lifecycle    string  `json:"lifecycle"`
	WorkerID     string  `json:"workerId"`
	Tokens       uint64  `json:"tokens"`
	PausedTotalS float64 `json:"pausedTotalS"`
	// Reason is why its latest admission decision was made (paused,
	// resumed, rotated, …: programLog), "" before any.
	Reason string `json:"reason"`
}

// Turn is one turn of a session, as its frontend reported its end.
type Turn struct {
	RequestID        string    `json:"requestId"`
	At               time.Time `json:"at"`
	WorkerID         string    `json:"workerId"`
	PromptTokens     uint32    `json:"promptTokens"`
	CachedTokens     uint32    `json:"cachedTokens"`
	CompletionTokens uint32    `json:"completionTokens"`
	TTFTMs           float64   `json:"ttftMs"`
	TotalMs          float64   `json:"totalMs"`
	FinishReason     string    `json:"finishReason"`
	Tools            []string  `json:"tools"`
}

// Cache is over every turn the schedulers recorded since they
// started (of the tenant in view): the page draws the hit rate over time
// from the differences between states.
type Cache struct {
	Turns             uint64 `json:"turns"`
	PromptTokens      uint64 `json:"promptTokens"`
	CachedTokens      uint64 `json:"cachedTokens"`
	IdealCachedTokens uint64 `json:"idealCachedTokens"`
	// The workers' evictions and re-prefills (Worker's) summed over those
	// that report them; nil where none does.
	EvictedBlocks     *uint64 `json:"evictedBlocks"`
	RePrefilledTokens *uint64 `json:"rePrefilledTokens"`
}

// Admission is one admission decision about a program.
type Admission struct {
	At        time.Time `json:"at"`
	Reason    string    `json:"reason"`
	Lifecycle string    `json:"lifecycle"`
	WorkerID  string    `json:"workerId"`
}
