package flashindex

import (
	"slices"
	"testing"
	"time"
)

func TestFreshness(t *testing.T) {
	const bound = 3 * time.Second
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type step func(f *Freshness)
	resynced := func(d time.Duration) step { return func(f *Freshness) { f.Resynced("w", at(d)) } }
	applied := func(d time.Duration) step { return func(f *Freshness) { f.Applied("w", at(d)) } }
	probed := func(d time.Duration) step { return func(f *Freshness) { f.Probed("w", at(d)) } }
	opened := func(f *Freshness) { f.Opened("w") }
	ended := func(f *Freshness) { f.Ended("w") }
	removed := func(f *Freshness) { f.Removed("w") }

	for _, tc := range []struct {
		name  string
		bound time.Duration
		steps []step
		at    time.Duration
		stale bool
	}{
		{name: "unknown worker", at: time.Hour},
		{name: "within the bound of the snapshot", steps: []step{resynced(0)}, at: bound},
		{name: "past the bound of the snapshot", steps: []step{resynced(0)}, at: bound + 1, stale: true},
		{name: "batches keep it fresh", steps: []step{resynced(0), opened, applied(2 * time.Second), applied(4 * time.Second)}, at: 6 * time.Second},
		{name: "answered probes keep an idle subscribed worker fresh",
			steps: []step{resynced(0), opened, probed(time.Second), probed(2 * time.Second), probed(3 * time.Second), probed(4 * time.Second)}, at: 6 * time.Second},
		{name: "probes count only while subscribed",
			steps: []step{resynced(0), opened, ended, probed(time.Second), probed(2 * time.Second), probed(3 * time.Second)}, at: 4 * time.Second, stale: true},
		{name: "one of two subscriptions ended: still subscribed",
			steps: []step{resynced(0), opened, opened, ended, probed(2 * time.Second)}, at: 4 * time.Second},
		{name: "a late batch does not undo the latch",
			steps: []step{resynced(0), opened, applied(5 * time.Second)}, at: 5 * time.Second, stale: true},
		{name: "a late probe does not undo the latch",
			steps: []step{resynced(0), opened, probed(5 * time.Second), probed(6 * time.Second)}, at: 6 * time.Second, stale: true},
		{name: "a snapshot restores it", steps: []step{resynced(0), opened, applied(5 * time.Second), resynced(6 * time.Second)}, at: 7 * time.Second},
		{name: "removed is forgotten", steps: []step{resynced(0), removed}, at: time.Hour},
		{name: "no bound: never stale", bound: -1, steps: []step{resynced(0)}, at: time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bound
			if tc.bound != 0 {
				b = tc.bound
			}
			f := NewFreshness(b)
			for _, s := range tc.steps {
				s(f)
			}
			if got := f.Stale("w", at(tc.at)); got != tc.stale {
				t.Errorf("Stale = %v, want %v", got, tc.stale)
			}
			want := 0
			if tc.stale {
				want = 1
			}
			if got := f.Count(at(tc.at)); got != want {
				t.Errorf("Count = %d, want %d", got, want)
			}
			got := f.StaleAmong(slices.Values([]string{"w", "other"}), at(tc.at))
			if got["w"] != tc.stale || len(got) != want {
				t.Errorf("StaleAmong = %v, want stale %v", got, tc.stale)
			}
		})
	}
}

func TestFreshnessProbeAnswersStale(t *testing.T) {
	t0 := time.Unix(1000, 0)
	f := NewFreshness(time.Second)
	f.Resynced("w", t0)
	f.Opened("w")
	if f.Probed("w", t0.Add(500*time.Millisecond)) {
		t.Fatal("fresh worker's probe answered stale")
	}
	if !f.Probed("w", t0.Add(2*time.Second)) {
		t.Fatal("probe past the bound did not answer stale: the shell would never reload the snapshot")
	}
	if f.Probed("nobody", t0) {
		t.Fatal("unknown worker answered stale")
	}
}

func TestFreshnessCheckAnnouncesEachTransitionOnce(t *testing.T) {
	t0 := time.Unix(1000, 0)
	f := NewFreshness(time.Second)
	f.Resynced("a", t0)
	f.Resynced("b", t0.Add(time.Second))
	if ts := f.Check(t0.Add(time.Second)); len(ts) != 0 {
		t.Fatalf("transitions while fresh: %v", ts)
	}
	ts := f.Check(t0.Add(1500 * time.Millisecond))
	if len(ts) != 1 || ts[0].Worker != "a" || !ts[0].Stale || !ts[0].Since.Equal(t0) {
		t.Fatalf("first check = %v, want a stale since t0", ts)
	}
	if ts := f.Check(t0.Add(1600 * time.Millisecond)); len(ts) != 0 {
		t.Fatalf("announced again: %v", ts)
	}
	f.Resynced("a", t0.Add(1700*time.Millisecond))
	ts = f.Check(t0.Add(1800 * time.Millisecond))
	if len(ts) != 1 || ts[0].Worker != "a" || ts[0].Stale {
		t.Fatalf("after the reload = %v, want a fresh", ts)
	}
}

// A Watch says what Stale says, without the lock, through every transition:
// for a stream tracked before its first snapshot (stale until it loads,
// nothing announced before), kept fresh by probes, latched past the bound
// and fresh again from a snapshot.
func TestFreshnessWatch(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	f := NewFreshness(time.Second)
	v := f.Watch("pool")
	check := func(ms int, want bool) {
		t.Helper()
		if got, locked := v.Stale(at(ms)), f.Stale("pool", at(ms)); got != want || locked != want {
			t.Fatalf("at %d ms: Watch.Stale %v, Stale %v; want %v", ms, got, locked, want)
		}
	}
	check(0, true)
	f.Opened("pool")
	if !f.Probed("pool", at(0)) {
		t.Fatal("a probe before the first snapshot answered fresh: the shell would not ask for one")
	}
	check(0, true)
	if ts := f.Check(at(100)); len(ts) != 0 {
		t.Fatalf("announced before the first snapshot: %v", ts)
	}
	f.Resynced("pool", at(200))
	if ts := f.Check(at(300)); len(ts) != 1 || ts[0].Stale {
		t.Fatalf("check after the first snapshot: %v, want it announced fresh", ts)
	}
	check(1200, false)
	check(1201, true)
	f.Probed("pool", at(1000))
	check(1900, false)
	if ts := f.Check(at(3000)); len(ts) != 1 || !ts[0].Stale {
		t.Fatalf("check past the bound: %v, want the latch announced", ts)
	}
	f.Applied("pool", at(3000)) // a late batch: the latch holds
	check(3000, true)
	if v2 := f.Watch("pool"); !v2.Stale(at(3000)) {
		t.Fatal("a second Watch of a tracked stream reset it")
	}
	f.Resynced("pool", at(3100))
	check(3200, false)

	never := NewFreshness(-1)
	nv := never.Watch("pool")
	if !nv.Stale(at(0)) {
		t.Fatal("no bound: fresh before the first snapshot")
	}
	never.Resynced("pool", at(0))
	if nv.Stale(at(1 << 30)) {
		t.Fatal("no bound: stale after a snapshot")
	}
}
