package routing

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// BenchmarkRoute measures one routing decision (score every candidate, select,
// record load and the session lease, then free it) with 100,000 live session
// bindings. It reports p50/p99 wall time per call and process CPU per op
// alongside ns/op and allocs.
func BenchmarkRoute(b *testing.B) {
	for _, workers := range []int{8, 64, 1024} {
		for _, policy := range []Policy{PolicyKV, PolicyKVAffinity} {
			b.Run(fmt.Sprintf("policy=%s/workers=%d/sessions=100000", policy, workers), func(b *testing.B) {
				benchRoute(b, policy, workers, 100_000)
			})
		}
	}
}

// benchState is what benchRoute builds once per size: testing runs each
// benchmark function more than once (b.N = 1 first).
type benchState struct {
	r        *Router
	c        []Candidate
	ids      []string
	overlaps [][]Overlap
}

var benchStates = map[string]*benchState{}

func benchRoute(b *testing.B, policy Policy, workers, sessions int) {
	k := fmt.Sprint(policy, workers, sessions)
	st := benchStates[k]
	if st == nil {
		st = newBenchState(b, policy, workers, sessions)
		benchStates[k] = st
	}
	r, c, ids, overlaps := st.r, st.c, st.ids, st.overlaps
	lat := make([]time.Duration, 0, min(b.N, 1<<20))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := range b.N {
		ov := overlaps[i%len(overlaps)]
		for j := range c {
			c[j].Overlap = ov[j]
		}
		id := ids[i%sessions]
		start := time.Now()
		if _, err := r.Route(t0, Request{ID: id, SessionID: id, ISLTokens: 4096}, c, ""); err != nil {
			b.Fatal(err)
		}
		r.Finish(t0, id, 0)
		if len(lat) < cap(lat) {
			lat = append(lat, time.Since(start))
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	}
}

func newBenchState(b *testing.B, policy Policy, workers, sessions int) *benchState {
	cfg := DefaultConfig()
	cfg.Policy = policy
	r, err := New(&cfg, rand.New(rand.NewPCG(7, 7)))
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	c := make([]Candidate, workers)
	for i := range c {
		c[i] = Candidate{Worker: fmt.Sprintf("worker-%04d", i),
			Reported: Load{RunningRequests: rng.IntN(32), ActiveBlocks: rng.IntN(4000), CapacityTokens: 1 << 20, MaxRunning: 256}}
	}
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("session-%06d", i)
		if _, err := r.Route(t0, Request{ID: ids[i], SessionID: ids[i], ISLTokens: 4096}, c, ""); err != nil {
			b.Fatal(err)
		}
		r.Finish(t0, ids[i], 0)
	}
	overlaps := make([][]Overlap, 64)
	for i := range overlaps {
		overlaps[i] = make([]Overlap, workers)
		for j := range overlaps[i] {
			overlaps[i][j] = Overlap{Device: rng.IntN(256), HostExt: rng.IntN(16)}
		}
	}
	return &benchState{r: r, c: c, ids: ids, overlaps: overlaps}
}
