package admission

import (
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// Phase is what a program is doing.
type Phase uint8

const (
	Reasoning Phase = iota + 1 // a turn is generating
	Acting                     // between turns: running a tool
)

func (p Phase) String() string {
	switch p {
	case Reasoning:
		return "REASONING"
	case Acting:
		return "ACTING"
	}
	return "UNSPECIFIED"
}

// Lifecycle is whether a program may hold KV.
type Lifecycle uint8

const (
	Active     Lifecycle = iota + 1 // placed on a worker
	Paused                          // its place was taken; its next turn waits
	Terminated                      // released
)

func (l Lifecycle) String() string {
	switch l {
	case Active:
		return "ACTIVE"
	case Paused:
		return "PAUSED"
	case Terminated:
		return "TERMINATED"
	}
	return "UNSPECIFIED"
}

// Key names a program: sessions are scoped by tenant.
type Key struct {
	Tenant    string
	SessionID string
}

func (k Key) id() string { return k.Tenant + "\x00" + k.SessionID }

// Program is one agent session as admission control sees it. Values handed
// out are copies.
type Program struct {
	ID              string // Key.id(); the table's primary key
	Key             Key
	ParentSessionID string
	Phase           Phase
	Lifecycle       Lifecycle
	// Worker the program is placed on; "" unless ACTIVE (and placed).
	Worker string
	// LastWorker is where it ran last; a paused program queues there.
	LastWorker string
	// TokenTotal is the KV working set: the prompt while REASONING, prompt +
	// completion of the latest turn once ACTING.
	TokenTotal int64
	// Held is what the KV index last said the program holds on its worker
	// in its current tool call (Controller.Observe), in the tiers admission
	// counts; HeldSeen says there is such an answer. Until there is, an
	// ACTING program counts as holding TokenTotal.
	Held           int64
	HeldSeen       bool
	StepCount      int // turns completed
	MarkedForPause bool
	// Ending: a turn marked the session's last was admitted; the program is
	// released when a turn ends and none is left in flight, unless another
	// attempt of it follows (Controller.Supersede).
	Ending   bool
	InFlight int // admitted turns not yet finished
	Waiting  int // turns blocked in Route
	// PendingBoost: the next turn gets ResumePriorityBoost (just resumed).
	PendingBoost     bool
	SoftDemotedUntil time.Time
	PhaseSince       time.Time // acting_since while ACTING
	LastActive       time.Time
	PausedAt         time.Time
	ResumedAt        time.Time // the last resume; zero if never paused
	PausedTotal      time.Duration
	Created          time.Time
	// Seq orders programs by arrival (the queue is fair by it).
	Seq uint64
	// Tools are the tools the last turn called (what the program is away
	// running); AwaySince is when that turn ended, zero once it is back.
	Tools     []string
	AwaySince time.Time
}

// HeldTokens is what the KV index last said the program holds on its
// worker, when it is ACTIVE on one, ACTING, and the index was asked about
// its current tool call there (HeldFromIndex).
func (p *Program) HeldTokens() (int64, bool) {
	if p.Phase == Acting && p.HeldSeen && p.Lifecycle == Active && p.Worker != "" {
		return min(p.Held, p.TokenTotal), true
	}
	return 0, false
}

// held is the tokens admission counts the program as holding on its
// worker: what the index last said (HeldTokens), else its working set.
func (p *Program) held() int64 {
	if h, ok := p.HeldTokens(); ok {
		return h
	}
	return p.TokenTotal
}

const (
	tablePrograms  = "programs"
	indexID        = "id"
	indexWorker    = "worker"
	indexLifecycle = "lifecycle"
)

type tableFactory func() *memdb.TableSchema

var tableFactories = []tableFactory{programsTable}

func schema() *memdb.DBSchema {
	s := &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{}}
	for _, f := range tableFactories {
		t := f()
		s.Tables[t.Name] = t
	}
	return s
}

// row is what the table stores: the indexed fields, copied, and the program
// itself. The controller is single-threaded and never keeps a snapshot
// across calls, so it updates a program's other fields in place (a turn
// starting or ending touches no index) and writes a new row only when the
// worker or lifecycle changes. That keeps the per-turn path free of radix
// tree copies; memdb remains the source of truth for the secondary indexes.
type row struct {
	ID        string
	Worker    string
	Lifecycle uint8
	p         *Program
}

// programsTable: by id (tenant, session), by worker (ACTIVE placed programs
// only, since Worker is "" otherwise) and by lifecycle.
func programsTable() *memdb.TableSchema {
	return &memdb.TableSchema{
		Name: tablePrograms,
		Indexes: map[string]*memdb.IndexSchema{
			indexID:        {Name: indexID, Unique: true, Indexer: &memdb.StringFieldIndex{Field: "ID"}},
			indexWorker:    {Name: indexWorker, AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "Worker"}},
			indexLifecycle: {Name: indexLifecycle, Indexer: &memdb.UintFieldIndex{Field: "Lifecycle"}},
		},
	}
}

// Event is one program change, for WatchPrograms, traces and the hint
// emitter.
type Event struct {
	Time    time.Time
	Program Program // after the change
	Reason  string
	// PausedFor is how long the pause that just ended lasted (resumed,
	// forced_resume, or released while paused).
	PausedFor time.Duration
}

// Event reasons.
const (
	ReasonAdmitted     = "admitted"      // new program placed, REASONING
	ReasonQueued       = "queued"        // new program waits behind paused ones or for room
	ReasonReasoning    = "reasoning"     // a turn started
	ReasonActing       = "acting"        // a turn ended: tool call
	ReasonPlaced       = "placed"        // placed (or moved) to a worker
	ReasonPaused       = "paused"        // pause at the tick or at a marked boundary
	ReasonMarked       = "marked"        // REASONING program to pause at its next boundary
	ReasonResumed      = "resumed"       // BFD resume
	ReasonForcedResume = "forced_resume" // paused past ResumeTimeout
	ReasonReleased     = "released"      // session_final or explicit release
	ReasonExpired      = "expired"       // idle past IdleTTL
	ReasonUnplaced     = "unplaced"      // its worker left the fleet
	ReasonGrew         = "grew"          // paused: its prompt outgrew its worker's headroom
	ReasonCold         = "cold"          // a turn of a paused program runs in the cold lane
	ReasonRotated      = "rotated"       // paused: away past RotateAfter while turns wait
	ReasonWaitBound    = "wait_bound"    // resumed: a turn waited MaxWait
)
