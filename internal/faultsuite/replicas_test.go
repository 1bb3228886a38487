//go:build faults

package faultsuite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/turns"
)

// The replicated mesh of issue 18: 3 schedulers, 2 frontends, 2 flash
// indexers, 4 shims, each its own process. kill -9 of any one scheduler,
// frontend or indexer loses no turn that had not started streaming,
// sessions keep their worker, and the fleet is whole again within 2 s of
// the restart.
func TestReplicaFailover(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// session_aware keeps a session on its worker while that worker has
	// room (kv, the default, trades stickiness for balance), so a move is
	// the failover's doing.
	f := StartFixture(t, ctx, FixtureConfig{Name: "replicas", Workers: workers, Concurrency: 64,
		Schedulers: 3, Frontends: 2, FlashIndexers: 2, Extra: map[string][]string{"scheduler": {"--policy", "session_aware"}}})

	// Eight agent sessions whose conversations only grow: every turn but
	// the first has a worker holding its prefix, which it should keep.
	steadyLoad(t, ctx, f, 0)

	faults := []fault{
		{name: "kill -9 scheduler-1, restart after 1 s", run: killReplica("scheduler-1")},
		{name: "kill -9 frontend-1, restart after 1 s", run: killReplica("frontend-1")},
		{name: "kill -9 flash-indexer-0, restart after 1 s", run: killReplica("flash-indexer-0")},
		{name: "kill -9 scheduler-0, restart after 1 s", run: killReplica("scheduler-0")},
		{name: "SIGSTOP scheduler-0 for 15 s (past a lease), SIGCONT", run: freezeScheduler("scheduler-0", 15*time.Second)},
	}
	faults = selected(faults)
	var results []Result
	for _, fl := range faults {
		r := Result{Fault: fl.name}
		t.Run(fl.name, func(t *testing.T) {
			w := inject(t, f, fl, &r)
			// A killed frontend breaks the streams it was serving; nothing
			// else may.
			if r.Broken > 0 && !strings.Contains(fl.name, "frontend") {
				r.Fail("%d streams broken", r.Broken)
				t.Errorf("%d streams broken after their first byte", r.Broken)
			}
			moved, warm := moves(f.Client.Rec.Turns(func(*Turn) bool { return true }), w.from, w.to)
			r.Note("%d of %d warm turns in the window moved worker", moved, warm)
			if moved > 0 {
				r.Fail("%d turns moved worker", moved)
				t.Errorf("%d of %d warm session turns moved to another worker", moved, warm)
			}
			if r.Recovery < 0 || r.Recovery > maxRecovery {
				r.Fail("recovery %s > %s", seconds(r.Recovery), seconds(maxRecovery))
				t.Errorf("recovery %s, want ≤ %s", seconds(r.Recovery), seconds(maxRecovery))
			}
			t.Logf("%s: %d requests, %d lost, %d broken, recovery %s; %s", fl.name, r.Requests, r.Lost, r.Broken, seconds(r.Recovery), strings.Join(r.Notes, "; "))
		})
		results = append(results, r)
	}

	table := Markdown(results)
	fmt.Printf("\n### Replica failover (3 schedulers, 2 frontends, 2 flash indexers, %d workers, %d sessions; %s)\n\n%s\n",
		workers, sessions, time.Now().Format("2006-01-02"), table)
	out := os.Getenv("FAULTS_REPLICAS_OUT")
	if out == "" {
		out = filepath.Join(os.TempDir(), "switchyard-replicas.md")
	}
	if err := os.WriteFile(out, []byte(table), 0o644); err != nil {
		t.Errorf("write the table: %v", err)
	}
}

// killReplica kills one replica, restarts it a second later and measures
// how long from the restart until the fleet is whole again: the replica is
// back where every peer uses it.
func killReplica(id string) func(t *testing.T, f *Fixture, r *Result) {
	return func(t *testing.T, f *Fixture, r *Result) {
		p := f.Mesh.Proc(id)
		must(t, p.Kill())
		time.Sleep(time.Second)
		t1 := time.Now()
		must(t, p.Start())
		var whole func() error
		switch p.Service {
		case "scheduler":
			r.Note("recovery: restart → it lists every worker, every replica counts it, and it routes a turn")
			whole = func() error {
				ws, err := listWorkers(f, p)
				if err != nil || ws < workers {
					return fmt.Errorf("%d workers (%v)", ws, err)
				}
				for _, q := range f.Mesh.Replicas("scheduler") {
					if n, _, err := Metric(f.Ctx, "http://"+q.HTTP+"/metrics", "switchyard_scheduler_replicas"); err != nil || n != 3 {
						return fmt.Errorf("%s counts %v replicas (%v)", q.ID, n, err)
					}
				}
				// A turn of a session it owns (the load's sessions may all
				// hash elsewhere): its counters started at the restart.
				f.Client.Chat(f.Ctx, "probe", ownedBy(f, p), []Message{{Role: "user", Content: "A probe of the restarted scheduler."}}, 4)
				routes, err := MetricSum(f.Ctx, "http://"+p.HTTP+"/metrics", "switchyard_scheduler_routes_total")
				if err != nil {
					return err
				}
				if routes == 0 {
					return fmt.Errorf("%s has routed nothing", id)
				}
				return nil
			}
		case "frontend":
			r.Note("recovery: restart → a turn through it streams")
			base := "http://" + p.HTTP
			whole = func() error {
				if len(f.Client.Rec.Turns(func(tr *Turn) bool { return tr.Frontend == base && !tr.Head.IsZero() && tr.Start.After(t1) })) == 0 {
					return fmt.Errorf("no turn through %s yet", id)
				}
				return nil
			}
		case "flash-indexer":
			r.Note("recovery: restart → caught up, and every scheduler asks it again")
			whole = func() error {
				for _, q := range f.Mesh.Replicas("scheduler") {
					v, ok, err := Metric(f.Ctx, "http://"+q.HTTP+"/metrics", fmt.Sprintf("switchyard_scheduler_flash_indexer_ready{indexer=%q}", p.GRPC))
					if err != nil || !ok || v != 1 {
						return fmt.Errorf("%s does not ask %s (%v %v)", q.ID, id, v, err)
					}
				}
				return nil
			}
		}
		if err := poll(f.Ctx, 15*time.Second, 10*time.Millisecond, whole); err != nil {
			r.Never("not whole again: %v", err)
			return
		}
		r.Recovery = time.Since(t1)
	}
}

// freezeScheduler stops a scheduler replica (SIGSTOP) for d, longer than a
// worker's lease, and lets it go on. Meanwhile its sessions' turns must go to
// the next owner within the documented bound of a scheduler that does not
// answer (5 s, docs/reliability.md) rather than when the connection's
// keepalive gives up; on SIGCONT it must not expire the leases of the
// workers whose heartbeats it could not read while stopped (their sessions'
// bindings, and the index's blocks of those workers, would go with them).
// Recovery: SIGCONT → it routes a turn of a session it owns.
func freezeScheduler(id string, d time.Duration) func(t *testing.T, f *Fixture, r *Result) {
	return func(t *testing.T, f *Fixture, r *Result) {
		p := f.Mesh.Proc(id)
		metrics := "http://" + p.HTTP + "/metrics"
		expired0, _, err := Metric(f.Ctx, metrics, "switchyard_scheduler_lease_expirations_total")
		must(t, err)
		unhealthy0, _, err := Metric(f.Ctx, metrics, "switchyard_scheduler_worker_health_failures_total")
		must(t, err)
		t0 := time.Now()
		must(t, p.Signal(syscall.SIGSTOP))
		time.Sleep(d)
		t1 := time.Now()
		must(t, p.Signal(syscall.SIGCONT))
		r.Note("recovery: SIGCONT → it routes a turn of a session it owns")
		routes0, err := MetricSum(f.Ctx, metrics, "switchyard_scheduler_routes_total")
		must(t, err)
		err = poll(f.Ctx, 15*time.Second, 10*time.Millisecond, func() error {
			f.Client.Chat(f.Ctx, "probe", ownedBy(f, p), []Message{{Role: "user", Content: "A probe of the resumed scheduler."}}, 4)
			routes, err := MetricSum(f.Ctx, metrics, "switchyard_scheduler_routes_total")
			if err != nil || routes <= routes0 {
				return fmt.Errorf("%s has routed nothing since SIGCONT (%v)", id, err)
			}
			return nil
		})
		if err != nil {
			r.Never("not whole again: %v", err)
			return
		}
		r.Recovery = time.Since(t1)
		f.Quiesce(time.Now())
		wait, waited := longestStall(f.Client.Rec.Turns(Overlapping(t0, t1)), 2*time.Second)
		r.Note("while stopped the longest a client waited for its next byte: %s (%d turns waited > 2 s)", seconds(wait), waited)
		if wait > 5*time.Second {
			r.Fail("a client waited %s on the stopped scheduler", seconds(wait))
			t.Errorf("a client waited %s for its next byte while %s was stopped, want ≤ 5 s", seconds(wait), id)
		}
		expired, _, err := Metric(f.Ctx, metrics, "switchyard_scheduler_lease_expirations_total")
		if err != nil || expired != expired0 {
			r.Fail("%.0f leases expired on SIGCONT", expired-expired0)
			t.Errorf("%s expired %.0f worker leases when it went on (%v), want none: the workers were alive", id, expired-expired0, err)
		}
		unhealthy, _, err := Metric(f.Ctx, metrics, "switchyard_scheduler_worker_health_failures_total")
		if err != nil || unhealthy != unhealthy0 {
			r.Fail("%.0f workers failed their health check on SIGCONT", unhealthy-unhealthy0)
			t.Errorf("%s dropped %.0f workers for failed health checks when it went on (%v), want none", id, unhealthy-unhealthy0, err)
		}
	}
}

// ownedBy is a new session id whose owner is scheduler p, as every
// frontend computes it from the scheduler list (anonymous tenant).
func ownedBy(f *Fixture, p *Proc) string {
	var names []string
	me := -1
	for i, q := range f.Mesh.Replicas("scheduler") {
		names = append(names, q.GRPC)
		if q == p {
			me = i
		}
	}
	for i := 0; ; i++ {
		id := fmt.Sprintf("probe-%s-%d-%d", p.ID, time.Now().UnixNano(), i)
		if turns.Owner(admission.Key{Tenant: "anonymous", SessionID: id}, names) == me {
			return id
		}
	}
}

// listWorkers is how many workers scheduler p lists.
func listWorkers(f *Fixture, p *Proc) (int, error) {
	for i, q := range f.Mesh.Replicas("scheduler") {
		if q == p {
			ws, err := f.Clients.Scheds[i].ListWorkers(f.Ctx, &schedulerv1.ListWorkersRequest{})
			return len(ws.GetWorkers()), err
		}
	}
	return 0, fmt.Errorf("%s is not a scheduler", p.ID)
}

// moves counts the session turns started in [from, to] that were answered
// by another worker than the session's previous answered turn, of those
// that had a previous one (warm).
func moves(all []Turn, from, to time.Time) (moved, warm int) {
	slices.SortFunc(all, func(a, b Turn) int { return a.Start.Compare(b.Start) })
	last := map[string]string{}
	for _, t := range all {
		if t.Kind != "session" || !t.OK() || t.Worker == "" {
			continue
		}
		prev, ok := last[t.Session]
		last[t.Session] = t.Worker
		if !ok || t.Start.Before(from) || t.Start.After(to) {
			continue
		}
		warm++
		if prev != t.Worker {
			moved++
		}
	}
	return moved, warm
}
