package scheduler

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/pkg/admission"
)

// heartbeat sends w's load, running requests sampled now.
func (h *harness) heartbeat(t *testing.T, w string, running uint32) {
	t.Helper()
	load := &workerv1.WorkerLoad{RunningRequests: running, ObservedAt: timestamppb.New(h.clock.Now())}
	if _, err := h.client.Heartbeat(context.Background(), &schedulerv1.HeartbeatRequest{WorkerId: w, Load: load}); err != nil {
		t.Fatal(err)
	}
}

// A turn that runs past --stale-request-after keeps its load and its
// program's turn while its worker's load reports still count it; once they
// no longer do (its frontend died: the engine aborted it), the sweep drops
// it as before.
func TestStaleSweepKeepsATurnItsWorkerStillRuns(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Policy = "session_aware" })
	ctx := context.Background()
	h.register(t, worker("w1", 1<<20))
	if _, err := h.client.Route(ctx, routeReq("r1", "s", 160)); err != nil {
		t.Fatal(err)
	}
	inFlight := func() int { return h.svc.pipe.Router().Load().Worker("w1").Requests }
	phase := func() admission.Phase {
		p, _ := h.svc.ctrl.Get(admission.Key{Tenant: "t", SessionID: "s"})
		return p.Phase
	}
	stale := h.svc.cfg.Routing.StaleRequestAfter
	h.clock.Advance(3 * time.Second)
	h.heartbeat(t, "w1", 1)
	// Heartbeats every 3 s, each counting the turn, past the stale age.
	for h.clock.Now().Sub(t0) < stale+10*time.Second {
		h.clock.Advance(3 * time.Second)
		h.heartbeat(t, "w1", 1)
		h.svc.tick(ctx)
	}
	if inFlight() != 1 || phase() != admission.Reasoning {
		t.Fatalf("a turn its worker still runs was swept at the stale age: %d in flight, program %v", inFlight(), phase())
	}
	// Its frontend died: the engine aborted it, and says so.
	h.clock.Advance(3 * time.Second)
	h.heartbeat(t, "w1", 0)
	h.svc.tick(ctx)
	if inFlight() != 0 || phase() != admission.Acting {
		t.Fatalf("a stale turn its worker no longer runs is kept: %d in flight, program %v", inFlight(), phase())
	}
	if len(h.svc.inflight.turns) != 0 {
		t.Fatalf("the sweep kept %v", h.svc.inflight.turns)
	}
}

// A stale turn whose worker stops reporting fresh samples (a real engine's
// metrics no longer scraped: the shim sends the last one again) is dropped
// at the stale age, its last sample older than a lease; one still counted
// in fresh samples, at twelve stale ages.
func TestStaleSweepDropsTurnsWithoutFreshEvidence(t *testing.T) {
	for _, frozen := range []bool{true, false} {
		h := newHarness(t, nil)
		ctx := context.Background()
		h.register(t, worker("w1", 1<<20))
		if _, err := h.client.Route(ctx, routeReq("r1", "", 160)); err != nil {
			t.Fatal(err)
		}
		sampled := t0.Add(3 * time.Second)
		limit := runningBound * h.svc.cfg.Routing.StaleRequestAfter
		if frozen {
			limit = h.svc.cfg.Routing.StaleRequestAfter
		}
		for h.svc.pipe.Router().Load().Len() > 0 {
			h.clock.Advance(3 * time.Second)
			if !frozen {
				sampled = h.clock.Now()
			}
			load := &workerv1.WorkerLoad{RunningRequests: 1, ObservedAt: timestamppb.New(sampled)}
			if _, err := h.client.Heartbeat(ctx, &schedulerv1.HeartbeatRequest{WorkerId: "w1", Load: load}); err != nil {
				t.Fatal(err)
			}
			h.svc.tick(ctx)
			if age := h.clock.Now().Sub(t0); age > limit+3*time.Second {
				t.Fatalf("frozen %v: kept at %v, past %v", frozen, age, limit)
			}
		}
		if age := h.clock.Now().Sub(t0); age < limit-3*time.Second {
			t.Fatalf("frozen %v: dropped at %v, before %v", frozen, age, limit)
		}
	}
}

// The sweep's rule: a worker's stale turns are kept while its fresh report
// counts at least every turn of this scheduler's there it could count.
func TestStaleSweepRule(t *testing.T) {
	const after, bound, fresh = 5 * time.Minute, time.Hour, 10 * time.Second
	now := t0.Add(time.Hour - time.Minute)
	at := func(ago time.Duration) time.Time { return now.Add(-ago) }
	type turn struct {
		id, worker string
		epoch      uint64
		ago        time.Duration
	}
	type report struct {
		worker   string
		epoch    uint64
		ago      time.Duration
		requests int
	}
	for _, tc := range []struct {
		name    string
		turns   []turn
		reports []report
		ended   []string
		kept    int
	}{
		{name: "young turns are not looked at", turns: []turn{{"a", "w1", 1, time.Minute}}, ended: nil},
		{name: "no report: dropped", turns: []turn{{"a", "w1", 1, 6 * time.Minute}}, ended: []string{"a"}},
		{name: "counted: kept", turns: []turn{{"a", "w1", 1, 6 * time.Minute}},
			reports: []report{{"w1", 1, time.Second, 1}}, kept: 1},
		{name: "stale report: dropped", turns: []turn{{"a", "w1", 1, 6 * time.Minute}},
			reports: []report{{"w1", 1, 11 * time.Second, 1}}, ended: []string{"a"}},
		{name: "another incarnation: dropped", turns: []turn{{"a", "w1", 1, 6 * time.Minute}},
			reports: []report{{"w1", 2, time.Second, 5}}, ended: []string{"a"}},
		{name: "one of two ended unseen: both dropped", turns: []turn{{"a", "w1", 1, 6 * time.Minute}, {"b", "w1", 1, 7 * time.Minute}},
			reports: []report{{"w1", 1, time.Second, 1}}, ended: []string{"a", "b"}},
		{name: "a young turn the report counts", turns: []turn{{"a", "w1", 1, 6 * time.Minute}, {"b", "w1", 1, time.Minute}},
			reports: []report{{"w1", 1, time.Second, 1}}, ended: []string{"a"}},
		{name: "a turn routed after the report's sample is not counted", turns: []turn{{"a", "w1", 1, 6 * time.Minute}, {"b", "w1", 1, 2 * time.Second}},
			reports: []report{{"w1", 1, time.Second, 1}}, kept: 1},
		{name: "other workers' turns do not count", turns: []turn{{"a", "w1", 1, 6 * time.Minute}, {"b", "w2", 1, 6 * time.Minute}},
			reports: []report{{"w1", 1, time.Second, 1}, {"w2", 1, time.Second, 0}}, ended: []string{"b"}, kept: 1},
		{name: "past the bound: dropped", turns: []turn{{"a", "w1", 1, time.Hour}},
			reports: []report{{"w1", 1, time.Second, 9}}, ended: []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newInflightTurns()
			for _, tr := range tc.turns {
				f.routed(at(tr.ago), tr.id, admission.Key{SessionID: tr.id}, tr.worker, tr.epoch)
			}
			for _, r := range tc.reports {
				f.registered(at(r.ago), r.worker, r.epoch, time.Time{}, r.requests)
			}
			sw := f.sweep(now, after, bound, fresh)
			var ended []string
			for _, e := range sw.ended {
				ended = append(ended, e.id)
			}
			slices.Sort(ended)
			if !slices.Equal(ended, tc.ended) || sw.kept != tc.kept || sw.unseen+sw.overdue != len(ended) {
				t.Fatalf("ended %v (%d unseen, %d overdue), kept %d; want ended %v, kept %d", ended, sw.unseen, sw.overdue, sw.kept, tc.ended, tc.kept)
			}
			for _, id := range ended {
				if _, ok := f.turns[id]; ok {
					t.Errorf("%s ended but still in flight", id)
				}
			}
			if len(f.turns) != len(tc.turns)-len(ended) {
				t.Errorf("%d turns left of %d", len(f.turns), len(tc.turns))
			}
		})
	}
}

// A report whose sample is no newer than the last is no news.
func TestStaleReportsKeepTheirNewestSample(t *testing.T) {
	f := newInflightTurns()
	f.registered(t0, "w1", 1, t0, 0)
	f.reported(t0.Add(3*time.Second), "w1", t0.Add(3*time.Second), 2)
	f.reported(t0.Add(4*time.Second), "w1", t0.Add(2*time.Second), 0) // overtaken
	f.reported(t0.Add(6*time.Second), "w1", t0.Add(3*time.Second), 2) // the same sample again
	if r := f.reports["w1"]; r.requests != 2 || !r.at.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("report %+v", r)
	}
	f.reported(t0.Add(9*time.Second), "ghost", time.Time{}, 1) // not registered
	if _, ok := f.reports["ghost"]; ok {
		t.Fatal("a report of an unregistered worker was kept")
	}
}
