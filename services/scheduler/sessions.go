package scheduler

import (
	"context"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/services/servicekit/lru"
)

// sessionLedger is this replica's record of the sessions whose turns it
// routed: each one's turns and tokens as the frontends report them in
// FinishRequest, bounded (the least recently active forgotten first). It is
// what the frontends' admin API shows, merged over every replica, so that
// every frontend shows the same sessions whichever of them served the
// turns. It has its own lock: recording a turn does not wait for the turn
// pipeline.
type sessionLedger struct {
	mu  sync.Mutex
	lru *lru.Cache[sessionRecord]
	// totals by tenant, over every turn recorded (forgotten sessions'
	// too): the fleet's hit rate over time.
	totals map[string]*schedulerv1.UsageTotals
}

type sessionRecord struct {
	usage *schedulerv1.SessionUsage
	// context is the session's context as its latest turn left it (prompt
	// and completion tokens): what the next turn could find cached.
	context uint64
}

// recentTurns is how many turns a session keeps for the admin view.
const recentTurns = 32

func newSessionLedger(max int) *sessionLedger {
	return &sessionLedger{lru: lru.New[sessionRecord](max), totals: map[string]*schedulerv1.UsageTotals{}}
}

func ledgerKey(tenant, session string) string { return tenant + "\x00" + session }

// record counts the report of one finished (or failed) turn of req's
// session. An attempt another attempt of the same turn follows
// (superseded: the frontend moved the turn to another worker) is not a
// turn; its last attempt's report is, wherever that is routed. A report
// of a turn already recorded (a FinishRequest sent again) changes nothing.
func (l *sessionLedger) record(req *schedulerv1.FinishRequestRequest, now time.Time) {
	agent := req.GetAgent()
	if agent.GetSessionId() == "" || req.GetSuperseded() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	key := ledgerKey(agent.GetTenant(), agent.GetSessionId())
	// Known by the session's recent turns, not by the pipeline's Finish:
	// that says unknown of turns the view must count too (one swept stale
	// before its finish came, one routed by another replica or before a
	// restart). A repeat comes right after the report it repeats, well
	// within the recent turns.
	if r := l.lru.Peek(key); r != nil && r.recorded(req.GetRequestId()) {
		return
	}
	r := l.lru.Touch(key)
	if r.usage == nil {
		r.usage = &schedulerv1.SessionUsage{FirstSeen: timestamppb.New(now), Totals: &schedulerv1.UsageTotals{}}
	}
	tot := l.totals[agent.GetTenant()]
	if tot == nil {
		tot = &schedulerv1.UsageTotals{}
		l.totals[agent.GetTenant()] = tot
	}
	s, u := r.usage, req.GetUsage()
	// A replica that takes a session over starts with no context: the
	// ideal of the first turn it records is 0, as for a session's first.
	ideal := min(uint64(u.GetPromptTokens()), r.context)
	r.context = uint64(u.GetPromptTokens()) + uint64(u.GetCompletionTokens())
	this := turnTotals(u, ideal)
	addTotals(s.Totals, this)
	addTotals(tot, this)
	s.Agent = proto.CloneOf(agent)
	s.LastWorkerId = req.GetWorkerId()
	s.LastSeen = timestamppb.New(now)
	if len(s.RecentTurns) == recentTurns {
		s.RecentTurns = append(s.RecentTurns[:0], s.RecentTurns[1:]...)
	}
	s.RecentTurns = append(s.RecentTurns, &schedulerv1.TurnUsage{
		RequestId: req.GetRequestId(), WorkerId: req.GetWorkerId(),
		PromptTokens: u.GetPromptTokens(), CachedTokens: u.GetCachedTokens(), CompletionTokens: u.GetCompletionTokens(),
		TtftMs: req.GetTtftMs(), FinishReason: req.GetFinishReason(), ToolCallNames: req.GetToolCallNames(),
		FinishedAt: timestamppb.New(now), TotalMs: req.GetTotalMs(),
	})
}

// recorded reports whether the turn of requestID is among the session's
// recent turns.
func (r *sessionRecord) recorded(requestID string) bool {
	return slices.ContainsFunc(r.usage.GetRecentTurns(), func(t *schedulerv1.TurnUsage) bool { return t.GetRequestId() == requestID })
}

// turnTotals is one turn's report (u, and its ideal cached tokens) as
// totals.
func turnTotals(u *enginev1.Usage, ideal uint64) *schedulerv1.UsageTotals {
	return &schedulerv1.UsageTotals{Turns: 1, PromptTokens: uint64(u.GetPromptTokens()), CachedTokens: uint64(u.GetCachedTokens()),
		IdealCachedTokens: ideal, CompletionTokens: uint64(u.GetCompletionTokens())}
}

// addTotals adds t to to.
func addTotals(to, t *schedulerv1.UsageTotals) {
	to.Turns += t.Turns
	to.PromptTokens += t.PromptTokens
	to.CachedTokens += t.CachedTokens
	to.IdealCachedTokens += t.IdealCachedTokens
	to.CompletionTokens += t.CompletionTokens
}

// list returns up to limit sessions matching req, the most recently active
// first.
func (l *sessionLedger) list(req *schedulerv1.ListSessionsRequest, limit int) []*schedulerv1.SessionUsage {
	l.mu.Lock()
	defer l.mu.Unlock()
	if id := req.GetSessionId(); id != "" && req.GetTenant() != "" {
		if r := l.lru.Peek(ledgerKey(req.GetTenant(), id)); r != nil {
			return []*schedulerv1.SessionUsage{proto.CloneOf(r.usage)}
		}
		return nil
	}
	var out []*schedulerv1.SessionUsage
	l.lru.Each(func(_ string, r *sessionRecord) bool {
		a := r.usage.GetAgent()
		if (req.GetTenant() == "" || a.GetTenant() == req.GetTenant()) && (req.GetSessionId() == "" || a.GetSessionId() == req.GetSessionId()) {
			out = append(out, proto.CloneOf(r.usage))
		}
		return len(out) < limit
	})
	return out
}

// maxListedSessions is the most sessions one ListSessions answers.
const maxListedSessions = 1000

// ListSessions lists the sessions whose turns this replica routed, the most
// recently active first.
func (s *Service) ListSessions(_ context.Context, req *schedulerv1.ListSessionsRequest) (*schedulerv1.ListSessionsResponse, error) {
	limit := int(req.GetLimit())
	if limit <= 0 {
		limit = 100
	}
	// The list is copied under the ledger's lock, which every turn's
	// FinishRequest waits for.
	limit = min(limit, maxListedSessions)
	return &schedulerv1.ListSessionsResponse{Sessions: s.sessions.list(req, limit), Totals: s.sessions.total(req.GetTenant())}, nil
}

// total is tenant's totals ("" = every tenant's).
func (l *sessionLedger) total(tenant string) *schedulerv1.UsageTotals {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := &schedulerv1.UsageTotals{}
	for t, tot := range l.totals {
		if tenant == "" || t == tenant {
			addTotals(out, tot)
		}
	}
	return out
}
