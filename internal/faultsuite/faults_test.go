//go:build faults

package faultsuite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	sessionindexv1 "switchyard.dev/gen/switchyard/sessionindex/v1"
)

// The targets of issue 15: no turn lost before its first byte, recovery
// within 2 s.
const (
	maxRecovery = 2 * time.Second
	// staleBound is the flash indexer's --stale-after default; the index
	// may serve a partitioned worker's blocks this long (plus the poll).
	staleBound = 3 * time.Second
	sessions   = 8
	workers    = 4
)

// strictMidStream asserts broken == 0 for every fault: the frontend migrates
// a stream whose worker fails mid-answer, so none should break.
// FAULTS_STRICT_MIDSTREAM=0 asserts it only for the frontend's drain.
var strictMidStream = os.Getenv("FAULTS_STRICT_MIDSTREAM") != "0"

// fault is one row of the table: run injects it, waits for recovery and
// fills the result's recovery and notes; the window is from its start to
// its return.
type fault struct {
	name string
	run  func(t *testing.T, f *Fixture, r *Result)
	// drain: streams in flight must complete (broken must be 0).
	drain bool
	// noRecovery: recovery is not a time to assert (a burst).
	noRecovery bool
}

func TestFaults(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := StartFixture(t, ctx, FixtureConfig{Name: "faults", Workers: workers, ProxiedWorker: WorkerID(3), Concurrency: 200})

	// The steady load: eight agent sessions, each turn resending the
	// growing conversation after a short tool call.
	steadyLoad(t, ctx, f, 10)

	faults := []fault{
		{name: "150 concurrent requests at once", run: burst, noRecovery: true},
		{name: "kill -9 session-prefix-indexer + kvhint-emitter, restart after 1 s", run: killIndexerAndEmitter},
		{name: "kill -9 flash-indexer, restart after 1 s", run: killFlashIndexer},
		{name: "kill -9 scheduler, restart after 1 s", run: killScheduler},
		{name: "kill -9 engine shim, restart after 5 s", run: killShim},
		{name: "kill -9 engine shim mid-stream, restart after 2 s", run: killShimMidStream},
		{name: "flapping engine shim (4 kills in 4 s)", run: flapShim},
		{name: "slow engine shim (SIGSTOP 5 s)", run: stopShim},
		{name: "partition engine shim ↔ flash-indexer only (6 s)", run: partition},
		{name: "SIGTERM frontend with streams in flight", run: drainFrontend, drain: true},
	}
	faults = selected(faults)
	var results []Result
	for _, fl := range faults {
		r := Result{Fault: fl.name}
		t.Run(fl.name, func(t *testing.T) {
			w := inject(t, f, fl, &r)
			broken := w.broken
			if r.Broken > 0 {
				msg := fmt.Sprintf("%d of %d streams broken after their first byte: %s", r.Broken, r.Requests, strings.Join(Errors(broken, 4), " | "))
				if fl.drain || strictMidStream {
					r.Fail("%d streams broken", r.Broken)
					t.Error(msg)
				} else {
					t.Log(msg)
				}
			}
			if !fl.noRecovery && (r.Recovery < 0 || r.Recovery > maxRecovery) {
				r.Fail("recovery %s > %s", seconds(r.Recovery), seconds(maxRecovery))
				t.Errorf("recovery %s, want ≤ %s", seconds(r.Recovery), seconds(maxRecovery))
			}
			t.Logf("%s: %d requests, %d lost, %d broken, recovery %s; %s", fl.name, r.Requests, r.Lost, r.Broken, seconds(r.Recovery), strings.Join(r.Notes, "; "))
		})
		results = append(results, r)
	}

	table := Markdown(results)
	fmt.Printf("\n### Fault suite (%d workers, %d sessions; %s)\n\n%s\n", workers, sessions, time.Now().Format("2006-01-02"), table)
	out := os.Getenv("FAULTS_OUT")
	if out == "" {
		out = filepath.Join(os.TempDir(), "switchyard-faults.md")
	}
	if err := os.WriteFile(out, []byte(table), 0o644); err != nil {
		t.Errorf("write the table: %v", err)
	} else {
		fmt.Printf("table written to %s\n", out)
	}
}

// steadyLoad runs the fault tests' load until the test ends: the sessions,
// each turn resending the growing conversation after a short tool call
// (restarted after turnsPerConversation turns; 0 never), and returns once a
// turn has succeeded.
func steadyLoad(t *testing.T, ctx context.Context, f *Fixture, turnsPerConversation int) {
	stop := make(chan struct{})
	var load sync.WaitGroup
	for i := range sessions {
		s := &Session{ID: fmt.Sprintf("agent-%d", i), Kind: "session", MaxTokens: 24, TurnsPerConversation: turnsPerConversation, Think: 150 * time.Millisecond}
		load.Go(func() { s.Run(ctx, f.Client, stop) })
	}
	t.Cleanup(func() {
		close(stop)
		load.Wait()
	})
	if _, ok := f.FirstHead(time.Now(), 10*time.Second, func(t *Turn) bool { return t.Kind == "session" }); !ok {
		t.Fatal("no session turn succeeded")
	}
}

// window is what a fault's window saw.
type window struct {
	from, to     time.Time
	lost, broken []Turn
}

// selected is the faults FAULTS_ONLY names (all without it).
func selected(faults []fault) []fault {
	if only := os.Getenv("FAULTS_ONLY"); only != "" {
		faults = slices.DeleteFunc(faults, func(fl fault) bool { return !strings.Contains(fl.name, only) })
	}
	return faults
}

// inject waits for the mesh to be whole, lets a second of load run, runs
// the fault, waits for the turns it overlapped to end, counts them into r
// and fails the test for any turn lost before its first byte.
func inject(t *testing.T, f *Fixture, fl fault, r *Result) window {
	if err := f.Settle(30 * time.Second); err != nil {
		r.Fail("mesh not whole before the fault: %v", err)
		t.Fatalf("mesh not whole before the fault: %v", err)
	}
	time.Sleep(time.Second) // a second of steady load before the fault
	w := window{from: time.Now()}
	fl.run(t, f, r)
	w.to = time.Now()
	f.Quiesce(w.to)
	turns := f.Client.Rec.Turns(Overlapping(w.from, w.to))
	r.Count(turns)
	for _, tr := range turns {
		switch {
		case tr.Lost():
			w.lost = append(w.lost, tr)
		case tr.Broken():
			w.broken = append(w.broken, tr)
		}
	}
	if r.Lost > 0 {
		// The table says why too: it is what a CI log keeps.
		why := strings.Join(Errors(w.lost, 4), "; ")
		r.Fail("%d turns lost before their first byte: %s", r.Lost, why)
		t.Errorf("%d of %d turns lost before their first byte: %s", r.Lost, r.Requests, why)
	}
	return w
}

// ---- the faults -----------------------------------------------------------

// burst sends 150 new sessions' first turns at once.
func burst(t *testing.T, f *Fixture, r *Result) {
	const n = 150
	t0 := time.Now()
	var wg sync.WaitGroup
	turns := make([]*Turn, n)
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("burst-%d-%d", t0.UnixNano(), i)
			turns[i] = f.Client.Chat(f.Ctx, "burst", id, []Message{{Role: "user", Content: "Burst request " + id + ": summarise the design of a KV-aware router in two sentences."}}, 16)
		})
	}
	wg.Wait()
	var last time.Time
	var ttft []time.Duration
	codes := map[int]int{}
	f.Client.Rec.update(func() {
		for _, tr := range turns {
			codes[tr.Status]++
			if !tr.Head.IsZero() {
				ttft = append(ttft, tr.Head.Sub(tr.Start))
				if tr.Head.After(last) {
					last = tr.Head
				}
			}
		}
	})
	slices.Sort(ttft)
	r.Recovery = Since(t0, last)
	r.Note("recovery: the burst → its last first token")
	if len(ttft) > 0 {
		r.Note("burst TTFT p50 %s, max %s", seconds(ttft[len(ttft)/2]), seconds(ttft[len(ttft)-1]))
	}
	var st []string
	for code, n := range codes {
		st = append(st, fmt.Sprintf("%d×%d", n, code))
	}
	slices.Sort(st)
	r.Note("statuses: %s", strings.Join(st, ", "))
}

// killIndexerAndEmitter kills both lineage services (off the request path).
func killIndexerAndEmitter(t *testing.T, f *Fixture, r *Result) {
	spi, em := f.Mesh.Proc("session-prefix-indexer"), f.Mesh.Proc("kvhint-emitter")
	must(t, spi.Kill())
	must(t, em.Kill())
	time.Sleep(time.Second)
	t1 := time.Now()
	must(t, spi.Start())
	must(t, em.Start())
	// Back when both serve and the indexer has learnt a session from the
	// scheduler's routes and the workers' events again.
	conn, err := dialFast(spi.GRPC)
	must(t, err)
	defer conn.Close()
	client := sessionindexv1.NewSessionPrefixIndexerServiceClient(conn)
	err = poll(f.Ctx, 15*time.Second, 20*time.Millisecond, func() error {
		if err := healthcheck(f.Ctx, em.GRPC); err != nil {
			return err
		}
		st, err := client.GetStats(f.Ctx, &sessionindexv1.GetStatsRequest{})
		if err != nil {
			return err
		}
		if st.GetSessions() == 0 {
			return fmt.Errorf("no session tracked yet")
		}
		return nil
	})
	if err != nil {
		r.Never("not back: %v", err)
		return
	}
	r.Recovery = time.Since(t1)
	r.Note("recovery: restart → both serving and the lineage indexer tracking sessions again")
}

// killFlashIndexer kills the flash indexer: routes go on without overlap.
func killFlashIndexer(t *testing.T, f *Fixture, r *Result) {
	fi := f.Mesh.Proc("flash-indexer")
	schedMetrics := "http://" + f.Mesh.Proc("scheduler").HTTP + "/metrics"
	fails0, _ := MetricSum(f.Ctx, schedMetrics, "switchyard_scheduler_find_matches_failures_total")
	must(t, fi.Kill())
	time.Sleep(time.Second)
	t1 := time.Now()
	must(t, fi.Start())
	err := poll(f.Ctx, 15*time.Second, 20*time.Millisecond, func() error {
		st, err := f.Clients.Flash.GetStats(f.Ctx, &flashindexv1.GetStatsRequest{})
		if err != nil {
			return err
		}
		if int(st.GetFollowedWorkers()) < workers || st.GetBlocks() == 0 {
			return fmt.Errorf("follows %d workers, %d blocks", st.GetFollowedWorkers(), st.GetBlocks())
		}
		return nil
	})
	if err != nil {
		r.Never("index not rebuilt: %v", err)
		return
	}
	r.Recovery = time.Since(t1)
	fails1, _ := MetricSum(f.Ctx, schedMetrics, "switchyard_scheduler_find_matches_failures_total")
	r.Note("recovery: restart → every worker followed and the index rebuilt from snapshots")
	r.Note("%.0f routes without overlap meanwhile", fails1-fails0)
}

// killScheduler kills the scheduler; turns wait for it (Route retries).
func killScheduler(t *testing.T, f *Fixture, r *Result) {
	s := f.Mesh.Proc("scheduler")
	t0 := time.Now()
	must(t, s.Kill())
	time.Sleep(time.Second)
	t1 := time.Now()
	must(t, s.Start())
	head, _ := f.FirstHead(t1, 15*time.Second, func(tr *Turn) bool { return tr.Start.After(t0) })
	r.Recovery = Since(t1, head)
	r.Note("recovery: restart → first token of a turn sent after the kill")
	var registered time.Duration = -1
	if err := poll(f.Ctx, 15*time.Second, 20*time.Millisecond, func() error {
		ws, err := f.Clients.Workers(f.Ctx)
		if err != nil || len(ws) < workers {
			return fmt.Errorf("%d workers (%v)", len(ws), err)
		}
		return nil
	}); err == nil {
		registered = time.Since(t1)
	}
	r.Note("all %d workers registered again %s after the restart", workers, seconds(registered))
}

// killShim kills one shim for five seconds.
func killShim(t *testing.T, f *Fixture, r *Result) {
	const w = "worker-0"
	p := f.Mesh.Proc(w)
	mig0 := migrations(f)
	t0 := time.Now()
	must(t, p.Kill())
	gone := deregistered(f, w, t0, 5*time.Second)
	t1 := time.Now()
	must(t, p.Start())
	head, _ := f.FirstOn(w, t1, 15*time.Second)
	r.Recovery = Since(t1, head)
	r.Note("recovery: restart → first token served by %s", w)
	f.Quiesce(time.Now())
	stall, _ := longestStall(f.Client.Rec.Turns(Overlapping(t0, t1)), 0)
	r.Note("deregistered %s after the kill; %.0f turns migrated; longest wait for a next byte %s", seconds(gone), migrations(f)-mig0, seconds(stall))
}

// killShimMidStream kills the shim that streams the most long answers.
func killShimMidStream(t *testing.T, f *Fixture, r *Result) {
	long := startLong(f, 8, 200, "long")
	var w string
	var on []*Turn
	if !setUp(f, r, 10*time.Second, 20*time.Millisecond, func() error {
		w, on = "", nil
		by := map[string][]*Turn{}
		f.Client.Rec.update(func() {
			for _, tr := range long() {
				if !tr.Head.IsZero() && tr.End.IsZero() {
					by[tr.Worker] = append(by[tr.Worker], tr)
				}
			}
		})
		for id, ts := range by {
			if len(ts) > len(on) {
				w, on = id, ts
			}
		}
		if len(on) < 2 {
			return fmt.Errorf("no shim streams two long answers")
		}
		return nil
	}) {
		return
	}
	time.Sleep(300 * time.Millisecond) // well into their streams
	mig0 := migrations(f)
	p := f.Mesh.Proc(w)
	must(t, p.Kill())
	time.Sleep(2 * time.Second)
	t1 := time.Now()
	must(t, p.Start())
	head, _ := f.FirstOn(w, t1, 15*time.Second)
	r.Recovery = Since(t1, head)
	f.Quiesce(time.Now())
	completed, broken := 0, 0
	f.Client.Rec.update(func() {
		for _, tr := range on {
			if tr.OK() {
				completed++
			} else {
				broken++
			}
		}
	})
	stall, _ := longestStall(f.Client.Rec.Turns(Overlapping(t1.Add(-2*time.Second), t1)), 0)
	r.Note("recovery: restart → first token served by %s", w)
	r.Note("%d streams mid-answer on %s at the kill: %d completed elsewhere, %d broken, longest wait for a next byte %s; %.0f migrations",
		len(on), w, completed, broken, seconds(stall), migrations(f)-mig0)
}

// flapShim kills and restarts one shim four times in quick succession.
func flapShim(t *testing.T, f *Fixture, r *Result) {
	const w = "worker-2"
	p := f.Mesh.Proc(w)
	mig0 := migrations(f)
	var t1 time.Time
	for range 4 {
		must(t, p.Kill())
		time.Sleep(300 * time.Millisecond)
		t1 = time.Now()
		must(t, p.Start())
		time.Sleep(700 * time.Millisecond)
	}
	head, _ := f.FirstOn(w, t1, 15*time.Second)
	r.Recovery = Since(t1, head)
	r.Note("recovery: last restart → first token served by %s; %.0f migrations", w, migrations(f)-mig0)
}

// stopShim freezes a shim (SIGSTOP) for five seconds: calls to it must time
// out rather than hang, and routing must stop sending it turns. Recovery is
// the longest any client waited for its next byte meanwhile.
func stopShim(t *testing.T, f *Fixture, r *Result) {
	const w = "worker-1"
	p := f.Mesh.Proc(w)
	series := `switchyard_scheduler_worker_inflight_requests{worker="` + w + `"}`
	schedMetrics := "http://" + f.Mesh.Proc("scheduler").HTTP + "/metrics"
	inflight := func() float64 { v, _, _ := Metric(f.Ctx, schedMetrics, series); return v }
	mig0 := migrations(f)
	at0 := inflight()
	t0 := time.Now()
	must(t, p.Signal(syscall.SIGSTOP))
	var gone time.Duration = -1
	var atGone, peak, peakAfterGone float64
	for time.Since(t0) < 5*time.Second {
		v := inflight()
		peak = max(peak, v)
		if gone < 0 {
			if ws, err := f.Clients.Workers(f.Ctx); err == nil && !slices.Contains(ws, w) {
				gone, atGone = time.Since(t0), v
			}
		} else {
			peakAfterGone = max(peakAfterGone, v)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t1 := time.Now()
	must(t, p.Signal(syscall.SIGCONT))
	head, _ := f.FirstOn(w, t1, 15*time.Second)
	back := Since(t1, head)
	f.Quiesce(time.Now())
	turns := f.Client.Rec.Turns(Overlapping(t0, t1))
	stall, stalled := longestStall(turns, 2*time.Second)
	onW := 0
	for _, tr := range turns {
		if tr.Stall > 2*time.Second && tr.Worker == w {
			onW++
		}
	}
	r.Recovery = stall
	r.Note("recovery: the longest a client waited for its next byte (%d turns waited > 2 s, %d of them answered by %s in the end)", stalled, onW, w)
	r.Note("deregistered %s after SIGSTOP; in flight on it: %.0f at SIGSTOP, peak %.0f, %.0f when deregistered, peak %.0f after; %.0f migrations",
		seconds(gone), at0, peak, atGone, peakAfterGone, migrations(f)-mig0)
	r.Note("SIGCONT → first token served by %s: %s", w, seconds(back))
	if gone >= 0 && peakAfterGone > atGone {
		r.Fail("turns piled up on the frozen shim after it was deregistered (%.0f → %.0f)", atGone, peakAfterGone)
		t.Errorf("pile-up on the frozen shim: %.0f in flight when deregistered, %.0f after", atGone, peakAfterGone)
	}
}

// longestStall is the longest wait for a next byte among turns, and how
// many waited longer than over.
func longestStall(turns []Turn, over time.Duration) (longest time.Duration, n int) {
	for _, tr := range turns {
		longest = max(longest, tr.Stall)
		if tr.Stall > over {
			n++
		}
	}
	return longest, n
}

// partition cuts the proxied shim off from the flash indexer only: its
// events stop while it keeps serving turns, and the index must stop
// counting its blocks as hits within the stale bound.
func partition(t *testing.T, f *Fixture, r *Result) {
	w := f.ProxiedWorker
	if _, ok := f.FirstOn(w, time.Now().Add(-time.Hour), 10*time.Second); !ok {
		r.Never("no turn ever served by %s", w)
		return
	}
	var q []uint64
	if !setUp(f, r, 10*time.Second, 50*time.Millisecond, func() error {
		var err error
		q, err = heldQuery(f, w)
		if err != nil {
			return err
		}
		if !reported(f, w, q) {
			return fmt.Errorf("%s not reported for its own blocks", w)
		}
		return nil
	}) {
		return
	}
	flash := f.Mesh.Proc("flash-indexer")
	pid := flash.Pid()
	t0 := time.Now()
	f.Proxy.Cut(func(p int) bool { return p == pid })
	var dropped time.Time
	for time.Since(t0) < staleBound+5*time.Second {
		if !reported(f, w, q) {
			dropped = time.Now()
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	served := Since(t0, dropped)
	// Stay cut past the bound, then heal.
	for time.Since(t0) < 6*time.Second {
		time.Sleep(50 * time.Millisecond)
	}
	t1 := time.Now()
	f.Proxy.Heal()
	var back time.Time
	_ = poll(f.Ctx, 15*time.Second, 25*time.Millisecond, func() error {
		q2, err := heldQuery(f, w)
		if err != nil {
			return err
		}
		if !reported(f, w, q2) {
			return fmt.Errorf("not reported")
		}
		back = time.Now()
		return nil
	})
	r.Recovery = Since(t1, back)
	onW := 0
	for _, tr := range f.Client.Rec.Turns(Overlapping(t0, t1)) {
		if tr.Worker == w && tr.OK() {
			onW++
		}
	}
	servedFor := seconds(served)
	if served < 0 {
		servedFor = "the whole cut"
	}
	r.Note("recovery: heal → %s's blocks count as hits again (snapshot reloaded)", w)
	r.Note("its blocks were still served as hits for %s after the cut (bound %s); %d turns served by it while cut off",
		servedFor, seconds(staleBound), onW)
	if served < 0 || served > staleBound+500*time.Millisecond {
		r.Fail("stale blocks served as hits for %s", servedFor)
		t.Errorf("the index served the partitioned worker's blocks as hits for %s after the cut, want ≤ %s", servedFor, seconds(staleBound))
	}
}

// drainFrontend sends SIGTERM to the frontend with long streams in flight;
// they must all complete, then it restarts.
func drainFrontend(t *testing.T, f *Fixture, r *Result) {
	long := startLong(f, 10, 160, "drain")
	if !setUp(f, r, 10*time.Second, 20*time.Millisecond, func() error {
		n := 0
		f.Client.Rec.update(func() {
			for _, tr := range long() {
				if !tr.Head.IsZero() {
					n++
				}
			}
		})
		if n < 10 {
			return fmt.Errorf("%d of 10 streaming", n)
		}
		return nil
	}) {
		return
	}
	p := f.Mesh.Proc("frontend")
	t0 := time.Now()
	inFlight := len(f.Client.Rec.Turns(func(tr *Turn) bool { return !tr.Head.IsZero() && tr.End.IsZero() }))
	must(t, p.Signal(syscall.SIGTERM))
	if err := p.Wait(20 * time.Second); err != nil {
		t.Errorf("frontend did not exit after SIGTERM: %v", err)
		_ = p.Kill()
	}
	drained := time.Since(t0)
	t1 := time.Now()
	must(t, p.Start())
	head, _ := f.FirstHead(t1, 15*time.Second, func(*Turn) bool { return true })
	r.Recovery = Since(t1, head)
	completed := 0
	f.Quiesce(time.Now())
	f.Client.Rec.update(func() {
		for _, tr := range long() {
			if tr.OK() {
				completed++
			}
		}
	})
	r.Note("recovery: restart → first token")
	r.Note("%d streams in flight at SIGTERM (10 long ones: %d completed); drained and exited in %s",
		inFlight, completed, seconds(drained))
	if inFlight < 8 {
		r.Fail("only %d streams in flight at SIGTERM", inFlight)
		t.Errorf("only %d streams in flight at SIGTERM, want 8–12", inFlight)
	}
}

// ---- helpers ----------------------------------------------------------------

// setUp polls until cond holds (poll), reporting false when it did not: the
// fault cannot be injected, its recovery is never seen.
func setUp(f *Fixture, r *Result, d, interval time.Duration, cond func() error) bool {
	if err := poll(f.Ctx, d, interval, cond); err != nil {
		r.Never("could not set up: %v", err)
		return false
	}
	return true
}

// startLong starts n long answers of new sessions in the background; the
// returned function lists them as the recorder holds them (call it under
// the recorder's lock, in Rec.update).
func startLong(f *Fixture, n, maxTokens int, kind string) func() []*Turn {
	prefix := fmt.Sprintf("%s-%d-", kind, time.Now().UnixNano())
	for i := range n {
		id := fmt.Sprintf("%s%d", prefix, i)
		go f.Client.Chat(f.Ctx, kind, id, []Message{{Role: "user", Content: "Long answer " + id + ": explain, step by step, how a mesh of services routes agent sessions by KV cache."}}, maxTokens)
	}
	return func() []*Turn {
		var turns []*Turn
		for _, tr := range f.Client.Rec.turns {
			if strings.HasPrefix(tr.Session, prefix) {
				turns = append(turns, tr)
			}
		}
		return turns
	}
}

// migrations is the frontend's migration count (0 if it cannot be read).
func migrations(f *Fixture) float64 {
	v, _ := MetricSum(f.Ctx, "http://"+f.Mesh.Proc("frontend").HTTP+"/metrics", "switchyard_frontend_migrations_total")
	return v
}

// deregistered waits d and reports how long after t0 the scheduler stopped
// listing worker (-1: it did not).
func deregistered(f *Fixture, worker string, t0 time.Time, d time.Duration) time.Duration {
	gone := time.Duration(-1)
	for time.Since(t0) < d {
		if gone < 0 {
			if ws, err := f.Clients.Workers(f.Ctx); err == nil && !slices.Contains(ws, worker) {
				gone = time.Since(t0)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return gone
}

// heldQuery is a prompt (block hashes from the root) that the index says
// worker holds: the first root chain of its dump.
func heldQuery(f *Fixture, worker string) ([]uint64, error) {
	ctx, cancel := context.WithTimeout(f.Ctx, time.Second)
	defer cancel()
	d, err := f.Clients.Flash.DumpWorker(ctx, &flashindexv1.DumpWorkerRequest{WorkerId: worker})
	if err != nil {
		return nil, err
	}
	for _, ev := range d.GetEvents() {
		if s := ev.GetStored(); s != nil && s.GetParentHash() == 0 && len(s.GetBlockHashes()) > 0 {
			return s.GetBlockHashes(), nil
		}
	}
	return nil, fmt.Errorf("%s holds no root chain", worker)
}

// reported: FindMatches counts device blocks of q on worker.
func reported(f *Fixture, worker string, q []uint64) bool {
	ctx, cancel := context.WithTimeout(f.Ctx, time.Second)
	defer cancel()
	resp, err := f.Clients.Flash.FindMatches(ctx, &flashindexv1.FindMatchesRequest{
		Query: &flashindexv1.FindMatchesRequest_Hashes{Hashes: &flashindexv1.BlockHashes{BlockHashes: q}},
	})
	if err != nil {
		return true // unknown: keep looking
	}
	for _, o := range resp.GetOverlaps() {
		if o.GetWorkerId() == worker && o.GetDeviceBlocks() > 0 {
			return true
		}
	}
	return false
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
