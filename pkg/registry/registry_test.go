package registry

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	memdb "github.com/hashicorp/go-memdb"

	"switchyard.dev/pkg/agentctx"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newReg(t *testing.T) *Registry {
	t.Helper()
	r, err := New(&Config{LeaseTTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func worker(id string) Worker {
	return Worker{ID: id, Address: "127.0.0.1:1", Engine: "sim", BlockSize: 16,
		Capacity: Capacity{KVCapacityTokens: 1 << 16, MaxRunning: 64}, Epoch: 1}
}

// fired reports whether any channel of the watch set is closed, without
// blocking (WatchSet.Watch with a closed timeout would pick at random).
func fired(ws memdb.WatchSet) bool {
	for ch := range ws {
		select {
		case <-ch:
			return true
		default:
		}
	}
	return false
}

func TestRegisterHeartbeatExpire(t *testing.T) {
	r := newReg(t)
	if changed, err := r.Register(t0, worker("a")); err != nil || !changed {
		t.Fatalf("register: %v %v", changed, err)
	}
	if err := r.Heartbeat(t0.Add(5*time.Second), "a", Load{RunningRequests: 3}); err != nil {
		t.Fatal(err)
	}
	w, ok := r.Get("a")
	if !ok || w.Load.RunningRequests != 3 || !w.LeaseExpiresAt.Equal(t0.Add(15*time.Second)) {
		t.Fatalf("get: %+v %v", w, ok)
	}
	if gone, _ := r.Expire(t0.Add(15*time.Second - time.Nanosecond)); len(gone) != 0 {
		t.Fatalf("expired before the lease ran out: %v", gone)
	}
	gone, err := r.Expire(t0.Add(15 * time.Second))
	if err != nil || len(gone) != 1 || gone[0].ID != "a" || gone[0].Load.RunningRequests != 3 {
		t.Fatalf("expire: %+v %v", gone, err)
	}
	if err := r.Heartbeat(t0.Add(16*time.Second), "a", Load{}); !errors.Is(err, ErrUnknownWorker) {
		t.Fatalf("heartbeat after expiry: %v, want ErrUnknownWorker", err)
	}
	if r.Len() != 0 {
		t.Fatal("worker still listed")
	}
}

func TestRegisterValidates(t *testing.T) {
	r := newReg(t)
	for _, w := range []Worker{{}, {ID: "x"}, {ID: "x", Address: "a", BlockSize: -1}, {ID: strings.Repeat("w", agentctx.MaxIDBytes+1), Address: "a"}} {
		if _, err := r.Register(t0, w); !errors.Is(err, ErrInvalidWorker) {
			t.Errorf("%+v: err %v", w, err)
		}
	}
	if _, err := New(&Config{LeaseTTL: -1}); err == nil {
		t.Error("negative TTL accepted")
	}
}

func TestDeregister(t *testing.T) {
	r := newReg(t)
	r.Register(t0, worker("a"))
	if _, err := r.Deregister("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Deregister("a"); !errors.Is(err, ErrUnknownWorker) {
		t.Fatalf("second deregister: %v", err)
	}
}

func TestWatchMembershipNotHeartbeats(t *testing.T) {
	r := newReg(t)
	r.Register(t0, worker("a"))

	ws := memdb.NewWatchSet()
	if _, err := r.Members(ws); err != nil {
		t.Fatal(err)
	}
	r.Heartbeat(t0, "a", Load{RunningRequests: 9})
	if changed, _ := r.Register(t0, worker("a")); changed {
		t.Fatal("identical re-registration reported a change")
	}
	if fired(ws) {
		t.Fatal("membership watch woke on a heartbeat or a no-op re-registration")
	}
	w := worker("a")
	w.Epoch = 2
	r.Register(t0, w)
	if !fired(ws) {
		t.Fatal("membership watch did not wake on a new epoch")
	}

	ws = memdb.NewWatchSet()
	r.List(ws)
	r.Heartbeat(t0, "a", Load{RunningRequests: 1})
	if !fired(ws) {
		t.Fatal("load watch did not wake on a heartbeat")
	}
}

func TestListJoinsLoad(t *testing.T) {
	r := newReg(t)
	for _, id := range []string{"c", "a", "b"} {
		r.Register(t0, worker(id))
		r.Heartbeat(t0, id, Load{WaitingRequests: int(id[0])})
	}
	ws, _ := r.List(nil)
	if len(ws) != 3 {
		t.Fatalf("%d workers", len(ws))
	}
	for i, id := range []string{"a", "b", "c"} {
		if ws[i].ID != id || ws[i].Load.WaitingRequests != int(id[0]) {
			t.Fatalf("worker %d: %+v", i, ws[i])
		}
	}
}

// churn applies one random operation to a random one of workers ids (w0,
// w1, …): a registration (regWeight times as likely as each other
// operation), a heartbeat, a deregistration, or an expiry after moving now
// on by up to maxStep-1 seconds. It returns the new now.
func churn(r *Registry, rng *rand.Rand, now time.Time, workers, regWeight, maxStep int) time.Time {
	id := fmt.Sprintf("w%d", rng.IntN(workers))
	switch op := rng.IntN(regWeight + 3); {
	case op < regWeight:
		w := worker(id)
		w.Epoch = uint64(rng.IntN(3))
		r.Register(now, w)
	case op == regWeight:
		r.Heartbeat(now, id, Load{RunningRequests: rng.IntN(9)})
	case op == regWeight+1:
		r.Deregister(id)
	default:
		now = now.Add(time.Duration(rng.IntN(maxStep)) * time.Second)
		r.Expire(now)
	}
	return now
}

// TestDiffAgainstModel applies random registrations, heartbeats, expiries and
// deregistrations and checks that replaying the Diff of consecutive snapshots
// on a plain map always reproduces the registry's membership.
func TestDiffAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	r := newReg(t)
	now := t0
	model := map[string]Worker{}
	prev, _ := r.Members(nil)
	for step := range 2000 {
		now = churn(r, rng, now, 12, 2, 6)
		next, _ := r.Members(nil)
		for _, c := range Diff(prev, next) {
			switch c.Type {
			case Added:
				if _, ok := model[c.Worker.ID]; ok {
					t.Fatalf("step %d: added %s twice", step, c.Worker.ID)
				}
				model[c.Worker.ID] = c.Worker
			case Updated:
				if _, ok := model[c.Worker.ID]; !ok {
					t.Fatalf("step %d: updated unknown %s", step, c.Worker.ID)
				}
				model[c.Worker.ID] = c.Worker
			case Removed:
				if _, ok := model[c.Worker.ID]; !ok {
					t.Fatalf("step %d: removed unknown %s", step, c.Worker.ID)
				}
				delete(model, c.Worker.ID)
			}
		}
		got := map[string]Worker{}
		for _, w := range next {
			got[w.ID] = w
		}
		if d := cmp.Diff(got, model); d != "" {
			t.Fatalf("step %d: replayed diff differs (-registry +model):\n%s", step, d)
		}
		prev = next
	}
}

// TestSnapshotMatchesList checks the lock-free snapshot against the memdb
// tables after random operations.
func TestSnapshotMatchesList(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	r := newReg(t)
	now := t0
	for step := range 1000 {
		now = churn(r, rng, now, 10, 1, 4)
		list, _ := r.List(nil)
		snap := r.Snapshot()
		got := make([]Worker, len(snap))
		for i, w := range snap {
			got[i] = *w
		}
		if len(list) == 0 {
			list = []Worker{}
		}
		if d := cmp.Diff(list, got); d != "" {
			t.Fatalf("step %d: snapshot differs (-list +snapshot):\n%s", step, d)
		}
	}
}

// TestViewIndexFollowsMembership: after any mix of registrations,
// heartbeats and removals, View.Index names every worker's position and
// nothing else.
func TestViewIndexFollowsMembership(t *testing.T) {
	r := newReg(t)
	rng := rand.New(rand.NewPCG(4, 4))
	for op := range 2000 {
		id := fmt.Sprintf("w%02d", rng.IntN(40))
		switch rng.IntN(3) {
		case 0:
			if _, err := r.Register(t0, worker(id)); err != nil {
				t.Fatal(err)
			}
		case 1:
			_ = r.Heartbeat(t0, id, Load{RunningRequests: op})
		case 2:
			_, _ = r.Deregister(id)
		}
		v := r.View()
		for i, w := range v.Workers {
			if got := v.Index(w.ID); got != i {
				t.Fatalf("op %d: Index(%s) = %d, want %d", op, w.ID, got, i)
			}
		}
		if v.Index(id) < 0 && r.Len() > 0 {
			if _, ok := r.Get(id); ok {
				t.Fatalf("op %d: %s registered but not indexed", op, id)
			}
		}
		if v.Index("ghost") != -1 {
			t.Fatal("ghost indexed")
		}
	}
}

func TestTierTokens(t *testing.T) {
	c := Capacity{GPUBlocks: 100, HostBlocks: 300, KVCapacityTokens: 400 * 16}
	if got := c.TierTokens(); got != [3]int64{1600, 4800, 0} {
		t.Errorf("split %v", got)
	}
	if got := (Capacity{KVCapacityTokens: 5000}).TierTokens(); got != [3]int64{5000, 0, 0} {
		t.Errorf("no blocks reported: %v", got)
	}
}
