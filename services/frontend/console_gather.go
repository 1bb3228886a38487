package frontend

import (
	"cmp"
	"context"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	frontendv1 "switchyard.dev/gen/switchyard/frontend/v1"
	kvhintv1 "switchyard.dev/gen/switchyard/kvhint/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/services/frontend/console"
)

// Gathering the console's document (console.State) from the services that
// hold its parts, and turning their messages into it.

// gatherConsole asks the scheduler replicas for tenant's view.
func (s *Service) gatherConsole(ctx context.Context, tenant string) (*console.State, error) {
	fleet, err := s.fleetSessions(ctx, &schedulerv1.ListSessionsRequest{Tenant: tenant, Limit: consoleSessions})
	if err != nil {
		return nil, err
	}
	workers, err := s.listWorkers(ctx)
	if err != nil {
		return nil, err
	}
	programs := s.fleetPrograms(ctx, tenant)
	st := &console.State{Tenant: tenant, At: time.Now().UTC(), SchedulersMissing: fleet.missing,
		Workers: []console.Worker{}, Sessions: []console.Session{}, // [] not null: the page's lists
		Cache: console.Cache{PromptTokens: fleet.totals.GetPromptTokens(), CachedTokens: fleet.totals.GetCachedTokens(),
			IdealCachedTokens: fleet.totals.GetIdealCachedTokens(), Turns: fleet.totals.GetTurns()}}
	if tenant == "" {
		st.Hints = s.hints(ctx)
	}
	st.LeaseTTLS = workers.GetLeaseTtl().AsDuration().Seconds()
	byWorker := map[string]int{}
	for _, w := range workers.GetWorkers() {
		cw := consoleWorkerOf(w)
		if tenant != "" {
			cw.Address = "" // the fleet's addresses are an operator's
		}
		st.Cache.EvictedBlocks = addKnown(st.Cache.EvictedBlocks, cw.EvictedBlocks)
		st.Cache.RePrefilledTokens = addKnown(st.Cache.RePrefilledTokens, cw.RePrefilledTokens)
		st.Workers = append(st.Workers, cw)
		byWorker[w.GetWorkerId()] = len(st.Workers) - 1
	}
	for _, p := range programs {
		if p.GetLifecycle() == schedulerv1.ProgramLifecycle_PROGRAM_LIFECYCLE_TERMINATED {
			continue // released: kept a while for the views, on no worker
		}
		// A paused program is on no worker; it queues on its last one.
		if i, ok := byWorker[cmp.Or(p.GetWorkerId(), p.GetLastWorkerId())]; ok {
			countProgram(&st.Workers[i].Programs, p)
		}
	}
	for _, u := range fleet.sessions {
		cs := consoleSessionOf(u)
		cs.Admissions = s.programLog.of(sessionKey(cs.Tenant, cs.SessionID))
		if p := programs[sessionKey(cs.Tenant, cs.SessionID)]; p != nil {
			cs.Program = consoleProgramOf(p)
			if n := len(cs.Admissions); n > 0 {
				cs.Program.Reason = cs.Admissions[n-1].Reason
			}
		}
		st.Sessions = append(st.Sessions, cs)
	}
	return st, nil
}

// listWorkers is the worker set with its loads, from the first scheduler
// replica that answers, in list order (every replica holds the same set).
func (s *Service) listWorkers(ctx context.Context) (*schedulerv1.ListWorkersResponse, error) {
	var first error
	for _, c := range s.scheds.clients {
		cctx, cancel := context.WithTimeout(ctx, fleetCallTimeout)
		resp, err := c.ListWorkers(cctx, &schedulerv1.ListWorkersRequest{})
		cancel()
		if err == nil {
			return resp, nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, status.Errorf(codes.Unavailable, "no scheduler replica listed the workers: %v", first)
}

// fleetPrograms is every replica's programs of tenant ("" = all), by
// session key; where two replicas hold one (a stand-in's, and its owner's
// back), the one active last.
func (s *Service) fleetPrograms(ctx context.Context, tenant string) map[string]*schedulerv1.Program {
	out := map[string]*schedulerv1.Program{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, c := range s.scheds.clients {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, fleetCallTimeout)
			defer cancel()
			resp, err := c.ListPrograms(cctx, &schedulerv1.ListProgramsRequest{Tenant: tenant})
			if err != nil {
				s.scheds.programsOut[i].failed(ctx, s.log, "a scheduler replica's ListPrograms", err, "scheduler", s.scheds.names[i])
				return
			}
			s.scheds.programsOut[i].answered(ctx, s.log, "a scheduler replica's ListPrograms", "scheduler", s.scheds.names[i])
			mu.Lock()
			defer mu.Unlock()
			for _, p := range resp.GetPrograms() {
				k := sessionKey(p.GetTenant(), p.GetSessionId())
				if q := out[k]; q == nil || p.GetLastActive().AsTime().After(q.GetLastActive().AsTime()) {
					out[k] = p
				}
			}
		})
	}
	wg.Wait()
	return out
}

func consoleWorkerOf(w *workerv1.Worker) console.Worker {
	l, c := w.GetLoad(), w.GetCapacity()
	var host, disk *uint64
	if l != nil {
		host, disk = widen(l.HostUsedBlocks), widen(l.DiskUsedBlocks)
	} else {
		l = &workerv1.WorkerLoad{}
	}
	used := uint64(l.GetUsedKvBlocks())
	total := uint64(l.GetTotalKvBlocks())
	if total == 0 {
		total = uint64(c.GetGpuBlocks())
	}
	return console.Worker{
		ID: w.GetWorkerId(), Address: w.GetAddress(), Engine: w.GetEngine(), Model: w.GetModel(),
		LeaseExpiresAt: w.GetLeaseExpiresAt().AsTime(),
		Running:        l.GetRunningRequests(), Waiting: l.GetWaitingRequests(), PrefixHitRate: l.GetPrefixHitRate(),
		Preemptions: l.GetPreemptions(), EvictedBlocks: l.EvictedBlocks, RePrefilledTokens: l.RePrefilledTokens,
		KV: []console.Tier{
			{Tier: "device", UsedBlocks: &used, TotalBlocks: total},
			{Tier: "host", UsedBlocks: host, TotalBlocks: uint64(c.GetHostBlocks())},
			{Tier: "disk", UsedBlocks: disk, TotalBlocks: uint64(c.GetDiskBlocks())},
			{Tier: "pool"},
		},
	}
}

// countProgram adds p to its worker's programs by state.
func countProgram(c *console.Programs, p *schedulerv1.Program) {
	paused := p.GetLifecycle() == schedulerv1.ProgramLifecycle_PROGRAM_LIFECYCLE_PAUSED
	switch reasoning := p.GetPhase() == schedulerv1.ProgramPhase_PROGRAM_PHASE_REASONING; {
	case reasoning && paused:
		c.ReasoningPaused++
	case reasoning:
		c.ReasoningActive++
	case paused:
		c.ActingPaused++
	default:
		c.ActingActive++
	}
	c.Tokens += p.GetTokenTotal()
}

// lifecycleName is ACTIVE, PAUSED or TERMINATED.
func lifecycleName(l schedulerv1.ProgramLifecycle) string {
	return strings.TrimPrefix(l.String(), "PROGRAM_LIFECYCLE_")
}

// finishName is a finish reason as the APIs spell it (stop, tool_calls).
func finishName(r enginev1.FinishReason) string {
	return strings.ToLower(strings.TrimPrefix(r.String(), "FINISH_REASON_"))
}

// addKnown is sum + v where v is known, nil while neither is.
func addKnown(sum, v *uint64) *uint64 {
	if v == nil {
		return sum
	}
	total := *v
	if sum != nil {
		total += *sum
	}
	return &total
}

// widen is *p as a uint64 (nil for nil).
func widen(p *uint32) *uint64 {
	if p == nil {
		return nil
	}
	v := uint64(*p)
	return &v
}

func consoleProgramOf(p *schedulerv1.Program) *console.Program {
	return &console.Program{
		Phase:     strings.TrimPrefix(p.GetPhase().String(), "PROGRAM_PHASE_"),
		Lifecycle: lifecycleName(p.GetLifecycle()),
		WorkerID:  cmp.Or(p.GetWorkerId(), p.GetLastWorkerId()), Tokens: p.GetTokenTotal(), PausedTotalS: p.GetPausedTotal().AsDuration().Seconds(),
	}
}

func consoleSessionOf(u *frontendv1.Session) console.Session {
	a := u.GetAgent()
	cs := console.Session{
		Tenant: a.GetTenant(), SessionID: a.GetSessionId(), ParentSessionID: a.GetParentSessionId(), Harness: a.GetHarness(),
		Turns: u.GetTurns(), PromptTokens: u.GetPromptTokens(), CachedTokens: u.GetCachedTokens(),
		IdealCachedTokens: u.GetIdealCachedTokens(), CompletionTokens: u.GetCompletionTokens(),
		LastWorkerID: u.GetLastWorkerId(), FirstSeen: u.GetFirstSeen().AsTime(), LastSeen: u.GetLastSeen().AsTime(),
		RecentTurns: []console.Turn{},
	}
	for _, t := range u.GetRecentTurns() {
		cs.RecentTurns = append(cs.RecentTurns, console.Turn{
			RequestID: t.GetRequestId(), At: t.GetFinishedAt().AsTime(), WorkerID: t.GetWorkerId(),
			PromptTokens: t.GetPromptTokens(), CachedTokens: t.GetCachedTokens(), CompletionTokens: t.GetCompletionTokens(),
			TTFTMs: t.GetTtftMs(), TotalMs: t.GetTotalMs(),
			FinishReason: finishName(t.GetFinishReason()),
			Tools:        append([]string{}, t.GetToolCallNames()...),
		})
	}
	return cs
}

// consoleRecentHints is how many of the latest hints a state lists.
const consoleRecentHints = 20

// hints asks the emitter for its counts and latest hints (nil: no emitter,
// or no answer).
func (s *Service) hints(ctx context.Context) *console.Hints {
	if s.hintConn == nil {
		return nil
	}
	c := kvhintv1.NewKvHintEmitterServiceClient(s.hintConn)
	cctx, cancel := context.WithTimeout(ctx, fleetCallTimeout)
	defer cancel()
	st, err := c.GetStats(cctx, &kvhintv1.GetStatsRequest{})
	if err != nil {
		s.hintsOut.failed(ctx, s.log, "the hint emitter", err)
		return nil
	}
	s.hintsOut.answered(ctx, s.log, "the hint emitter")
	h := &console.Hints{Sent: st.GetSent(), Accepted: st.GetAccepted(), Clipped: st.GetClipped(), Deferred: st.GetDeferred(),
		Rejected: st.GetRejected(), Throttled: st.GetThrottled(), Errors: st.GetErrors(), Unsupported: st.GetUnsupported(),
		Recent: []console.HintRecent{}}
	recent, err := c.ListRecentHints(cctx, &kvhintv1.ListRecentHintsRequest{Limit: consoleRecentHints})
	if err != nil {
		return h // it answered GetStats just before: a passing failure
	}
	for _, r := range recent.GetHints() {
		h.Recent = append(h.Recent, console.HintRecent{
			At: r.GetTime().AsTime(), WorkerID: r.GetWorkerId(), Policy: r.GetPolicy(), Action: r.GetAction().GetActionType(),
			Result: strings.ToLower(strings.TrimPrefix(r.GetOutcome().GetResult().String(), "HINT_RESULT_")), Reason: r.GetOutcome().GetReason(),
		})
	}
	return h
}
