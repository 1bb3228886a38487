package frontend

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
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
	"switchyard.dev/services/servicekit/lru"
)

// The console (/console on the HTTP port) is a page embedded in the binary
// (package console) that draws the fleet from one JSON document, first
// fetched from /console/state, then streamed from /console/events. The
// document is gathered here from the scheduler replicas: the worker set
// and its loads from one (every replica holds the same), the programs and
// the sessions from all of them, merged as the admin API merges them. It
// follows the admin API's rule for keys: a tenant's key sees its tenant's
// sessions and programs only, an operator's key every tenant's.

// consoleEvery is how often the console's stream sends the state, and how
// long one gathered state serves every viewer of a tenant: many open
// consoles cost the schedulers one gathering a second, not one each.
const consoleEvery = time.Second

// consoleSessions bounds the sessions one state lists (the most recently
// active).
const consoleSessions = 200

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

// consoleFeed is the server side's aggregator: the latest state of each
// tenant's view, gathered at most once per consoleEvery.
type consoleFeed struct {
	s  *Service
	mu sync.Mutex
	// views by tenant ("" = all), bounded (an operator may ask for any
	// tenant): each has its own lock, held while it gathers, so that the
	// viewers of one tenant wait for one gathering.
	views *lru.Cache[*consoleView]
	// drained is closed when the frontend begins to drain: open event
	// streams end instead of holding the drain to its deadline.
	drained chan struct{}
}

// consoleViews bounds the tenants' views kept.
const consoleViews = 256

func newConsoleFeed(s *Service) *consoleFeed {
	return &consoleFeed{s: s, views: lru.New[*consoleView](consoleViews), drained: make(chan struct{})}
}

type consoleView struct {
	mu   sync.Mutex
	at   time.Time
	body []byte
}

func (f *consoleFeed) state(ctx context.Context, tenant string) ([]byte, error) {
	f.mu.Lock()
	slot := f.views.Touch(tenant)
	if *slot == nil {
		*slot = &consoleView{}
	}
	v := *slot
	f.mu.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.body != nil && time.Since(v.at) < consoleEvery {
		return v.body, nil
	}
	st, err := f.s.gatherConsole(ctx, tenant)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	v.at, v.body = time.Now(), body
	return body, nil
}

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

// consoleTenant is the tenant a console request may see ("" = all), by
// the admin API's rule; ?tenant= narrows an operator's view.
func (s *Service) consoleTenant(r *http.Request) (string, error) {
	t, err := s.adminTenant(r.Header.Get("x-api-key"), r.Header.Get("Authorization"), r.URL.Query().Get("tenant"))
	switch status.Code(err) {
	case codes.OK:
		return t, nil
	case codes.PermissionDenied:
		return "", &apiError{Status: http.StatusForbidden, Kind: "permission_error", Message: status.Convert(err).Message()}
	default:
		return "", &apiError{Status: http.StatusUnauthorized, Kind: "authentication_error", Code: "invalid_api_key", Message: status.Convert(err).Message()}
	}
}

// serveConsoleState is GET /console/state: the state, once.
func (s *Service) serveConsoleState(w http.ResponseWriter, r *http.Request) error {
	tenant, err := s.consoleTenant(r)
	if err != nil {
		return err
	}
	body, err := s.console.state(r.Context(), tenant)
	if err != nil {
		return consoleUnavailable(r.Context(), err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, err = w.Write(body)
	return err
}

// serveConsoleEvents is GET /console/events: the state every
// consoleEvery as Server-Sent Events ("event: state"), until the client
// goes; a gathering that fails is sent as "event: unavailable" with its
// message, and the stream goes on.
func (s *Service) serveConsoleEvents(w http.ResponseWriter, r *http.Request) error {
	tenant, err := s.consoleTenant(r)
	if err != nil {
		return err
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		return &apiError{Status: http.StatusInternalServerError, Kind: "server_error", Message: "streaming is not supported here"}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	tick := time.NewTicker(consoleEvery)
	defer tick.Stop()
	for {
		body, err := s.console.state(r.Context(), tenant)
		if err != nil {
			msg, _ := json.Marshal(map[string]string{"message": status.Convert(err).Message()})
			body = msg
			fmt.Fprintf(w, "event: unavailable\ndata: %s\n\n", body)
		} else {
			fmt.Fprintf(w, "event: state\ndata: %s\n\n", body)
		}
		flusher.Flush()
		select {
		case <-r.Context().Done():
			return nil
		case <-s.console.drained:
			return nil // the frontend is stopping: the page reconnects elsewhere
		case <-tick.C:
		}
	}
}

// consoleUnavailable is a gathering's failure as an answer: the client
// left (499, nothing to say), or the schedulers did not answer (503).
func consoleUnavailable(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return &apiError{Status: 499, Message: "the client went away"}
	}
	return &apiError{Status: http.StatusServiceUnavailable, Kind: "server_error", Message: status.Convert(err).Message()}
}
