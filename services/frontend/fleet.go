package frontend

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	frontendv1 "switchyard.dev/gen/switchyard/frontend/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
)

// fleetCallTimeout bounds each replica's answer to an admin call: one that
// hangs is counted missing rather than holding the answer.
const fleetCallTimeout = 2 * time.Second

// fleetSessions asks every scheduler replica for the sessions req selects
// and merges their answers: every frontend shows the same sessions,
// whichever of them served the turns. A session has turns at two replicas
// when one took it over while its owner was down; its counts are summed
// (each turn is recorded once, by the replica that routed it) and its
// latest turn is the later one's. When no replica answers, the call fails
// UNAVAILABLE.
func (s *Service) fleetSessions(ctx context.Context, req *schedulerv1.ListSessionsRequest) (*fleetView, error) {
	clients := s.scheds.clients
	answers := make([]*schedulerv1.ListSessionsResponse, len(clients))
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, fleetCallTimeout)
			defer cancel()
			answers[i], errs[i] = c.ListSessions(cctx, req)
		})
	}
	wg.Wait()
	v := &fleetView{totals: &schedulerv1.UsageTotals{}}
	merged := map[string]*schedulerv1.SessionUsage{}
	for i, a := range answers {
		if errs[i] != nil {
			v.missing++
			s.scheds.sessionsOut[i].failed(ctx, s.log, "a scheduler replica's ListSessions", errs[i], "scheduler", s.scheds.names[i])
			continue
		}
		s.scheds.sessionsOut[i].answered(ctx, s.log, "a scheduler replica's ListSessions", "scheduler", s.scheds.names[i])
		v.totals = sumTotals(v.totals, a.GetTotals())
		for _, u := range a.GetSessions() {
			k := sessionKey(u.GetAgent().GetTenant(), u.GetAgent().GetSessionId())
			merged[k] = mergeUsage(merged[k], u)
		}
	}
	if int(v.missing) == len(clients) {
		// Each replica's failure is logged whole (outage); the caller, a
		// tenant perhaps, reads no mesh address.
		return nil, status.Errorf(codes.Unavailable, "no scheduler replica answered: %s", upstreamMessage(status.Convert(errs[0])))
	}
	for _, u := range merged {
		v.sessions = append(v.sessions, sessionToProto(u))
	}
	slices.SortFunc(v.sessions, func(a, b *frontendv1.Session) int {
		return cmp.Or(b.GetLastSeen().AsTime().Compare(a.GetLastSeen().AsTime()),
			cmp.Compare(a.GetAgent().GetTenant(), b.GetAgent().GetTenant()),
			cmp.Compare(a.GetAgent().GetSessionId(), b.GetAgent().GetSessionId()))
	})
	if limit := int(req.GetLimit()); limit > 0 && len(v.sessions) > limit {
		v.sessions = v.sessions[:limit]
	}
	return v, nil
}

// fleetView is the fleet's sessions as the replicas that answered know
// them.
type fleetView struct {
	sessions []*frontendv1.Session
	// totals are over every turn the answering replicas recorded.
	totals *schedulerv1.UsageTotals
	// missing is how many replicas did not answer.
	missing uint32
}

// mergeUsage adds b, another replica's record of a's session, to a (nil:
// none yet).
func mergeUsage(a, b *schedulerv1.SessionUsage) *schedulerv1.SessionUsage {
	if a == nil {
		return b
	}
	later := a
	if b.GetLastSeen().AsTime().After(a.GetLastSeen().AsTime()) {
		later = b
	}
	first := a.GetFirstSeen()
	if b.GetFirstSeen().AsTime().Before(first.AsTime()) {
		first = b.GetFirstSeen()
	}
	return &schedulerv1.SessionUsage{
		Agent: later.GetAgent(), LastWorkerId: later.GetLastWorkerId(), LastSeen: later.GetLastSeen(), FirstSeen: first,
		Totals:      sumTotals(a.GetTotals(), b.GetTotals()),
		RecentTurns: mergeTurns(a.GetRecentTurns(), b.GetRecentTurns()),
	}
}

// sumTotals is a + b.
func sumTotals(a, b *schedulerv1.UsageTotals) *schedulerv1.UsageTotals {
	return &schedulerv1.UsageTotals{
		Turns:             a.GetTurns() + b.GetTurns(),
		PromptTokens:      a.GetPromptTokens() + b.GetPromptTokens(),
		CachedTokens:      a.GetCachedTokens() + b.GetCachedTokens(),
		IdealCachedTokens: a.GetIdealCachedTokens() + b.GetIdealCachedTokens(),
		CompletionTokens:  a.GetCompletionTokens() + b.GetCompletionTokens(),
	}
}

// mergeTurns is two replicas' recent turns of one session in the order
// they finished, the latest recentTurns of them.
func mergeTurns(a, b []*schedulerv1.TurnUsage) []*schedulerv1.TurnUsage {
	out := slices.Concat(a, b)
	slices.SortStableFunc(out, func(x, y *schedulerv1.TurnUsage) int {
		return x.GetFinishedAt().AsTime().Compare(y.GetFinishedAt().AsTime())
	})
	return out[max(0, len(out)-recentTurns):]
}

// recentTurns is how many turns a session shows, as each replica keeps.
const recentTurns = 32

func sessionToProto(u *schedulerv1.SessionUsage) *frontendv1.Session {
	t := u.GetTotals()
	return &frontendv1.Session{
		Agent: u.GetAgent(), Turns: uint32(t.GetTurns()), LastWorkerId: u.GetLastWorkerId(),
		PromptTokens: t.GetPromptTokens(), CompletionTokens: t.GetCompletionTokens(), CachedTokens: t.GetCachedTokens(),
		IdealCachedTokens: t.GetIdealCachedTokens(), FirstSeen: u.GetFirstSeen(), LastSeen: u.GetLastSeen(),
		RecentTurns: u.GetRecentTurns(),
	}
}
