package flashindex

import (
	"bufio"
	"container/list"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvhash"
)

// ---- Mooncake replay -------------------------------------------------------

// mooncakeTrace is the conversation trace; override with
// SWITCHYARD_MOONCAKE_TRACE.
func mooncakeTrace() string {
	if p := os.Getenv("SWITCHYARD_MOONCAKE_TRACE"); p != "" {
		return p
	}
	return "../../../shared/data/mooncake/conversation_trace.jsonl"
}

// expandIDs turns Mooncake's 512-token prefix hash ids into 16-token block
// hashes: each id becomes 32 blocks whose local hashes derive from (id, j),
// chained with kvhash.Chain, so equal id prefixes give equal block chains.
func expandIDs(ids []uint64) []kv.BlockHash {
	const per = 512 / kvhash.DefaultBlockSize
	out := make([]kv.BlockHash, 0, len(ids)*per)
	var tok [kvhash.DefaultBlockSize]uint32
	for _, id := range ids {
		for j := 0; j < per; j++ {
			for k := range tok {
				tok[k] = uint32(id*per+uint64(j))*16 + uint32(k)
			}
			local := kvhash.LocalHash(tok[:], kvhash.BaseSeed)
			if len(out) == 0 {
				out = append(out, kvhash.Root(local))
			} else {
				out = append(out, kvhash.Chain(out[len(out)-1], local))
			}
		}
	}
	return out
}

type workerEvent struct {
	worker int
	ev     kv.Event
}

// lruEngine is a minimal paged prefix cache: LRU over blocks, a request's
// blocks touched tail first so that eviction takes leaves before their
// prefixes (what vLLM's free-queue order achieves).
type lruEngine struct {
	cap   int
	order *list.List
	where map[kv.BlockHash]*list.Element
}

func (e *lruEngine) serve(blocks []kv.BlockHash) (stored kv.Event, removed kv.Event) {
	k := 0
	for k < len(blocks) {
		if _, ok := e.where[blocks[k]]; !ok {
			break
		}
		k++
	}
	stored = kv.Event{Kind: kv.Stored}
	if k < len(blocks) {
		if k > 0 {
			stored.Parent = blocks[k-1]
		}
		stored.Blocks = blocks[k:]
	}
	for i := len(blocks) - 1; i >= 0; i-- {
		if el, ok := e.where[blocks[i]]; ok {
			e.order.MoveToFront(el)
		} else {
			e.where[blocks[i]] = e.order.PushFront(blocks[i])
		}
	}
	removed = kv.Event{Kind: kv.Removed}
	for e.order.Len() > e.cap {
		el := e.order.Back()
		b := el.Value.(kv.BlockHash)
		e.order.Remove(el)
		delete(e.where, b)
		removed.Blocks = append(removed.Blocks, b)
	}
	return stored, removed
}

var (
	replayOnce   sync.Once
	replayEvents []workerEvent
	replayBlocks int
	replayErr    error
)

// mooncakeEvents replays the conversation trace over 64 workers (session
// affinity on the first id after the shared system prompt, 16,384-block
// device caches like Dynamo's mocker default) and records the KV events.
func mooncakeEvents(tb testing.TB) ([]workerEvent, int) {
	replayOnce.Do(func() {
		f, err := os.Open(mooncakeTrace())
		if err != nil {
			replayErr = err
			return
		}
		defer f.Close()
		const workers = 64
		engines := make([]*lruEngine, workers)
		for i := range engines {
			engines[i] = &lruEngine{cap: 16384, order: list.New(), where: map[kv.BlockHash]*list.Element{}}
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			var rec struct {
				HashIDs []uint64 `json:"hash_ids"`
			}
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				replayErr = err
				return
			}
			if len(rec.HashIDs) == 0 {
				continue
			}
			key := rec.HashIDs[min(1, len(rec.HashIDs)-1)]
			w := int((key * 0x9e3779b97f4a7c15) >> 58) // 64 workers
			st, rm := engines[w].serve(expandIDs(rec.HashIDs))
			if len(st.Blocks) > 0 {
				replayEvents = append(replayEvents, workerEvent{w, st})
				replayBlocks += len(st.Blocks)
			}
			if len(rm.Blocks) > 0 {
				replayEvents = append(replayEvents, workerEvent{w, rm})
				replayBlocks += len(rm.Blocks)
			}
		}
		replayErr = sc.Err()
	})
	if replayErr != nil {
		tb.Skipf("mooncake trace: %v", replayErr)
	}
	return replayEvents, replayBlocks
}

var workerNames = func() []string {
	out := make([]string, 1024)
	for i := range out {
		out[i] = fmt.Sprintf("worker-%d", i)
	}
	return out
}()

// BenchmarkApplyMooncake applies the whole replay (all 64 workers' events in
// trace order) into a fresh index per iteration, on one goroutine.
func BenchmarkApplyMooncake(b *testing.B) {
	evs, blocks := mooncakeEvents(b)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	var total, cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		ix := New(Config{})
		runtime.GC()
		b.StartTimer()
		t0, c0 := time.Now(), threadCPU()
		for _, we := range evs {
			if err := ix.Apply(workerNames[we.worker], 0, we.ev); err != nil {
				b.Fatal(err)
			}
		}
		total += time.Since(t0)
		cpu += threadCPU() - c0
	}
	// Wall-clock rate, and the rate per CPU-second of this thread (the
	// shared benchmark machine is often oversubscribed; the latter is the
	// per-core figure).
	b.ReportMetric(float64(blocks)*float64(b.N)/total.Seconds(), "block-events/s")
	b.ReportMetric(float64(blocks)*float64(b.N)/cpu.Seconds(), "block-events/cpu-s")
	b.ReportMetric(float64(blocks), "block-events/op")
}

// contextSwitches is how many times the calling OS thread has been switched
// out, voluntarily or not.
func contextSwitches() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0
	}
	return ru.Nvcsw + ru.Nivcsw
}

// threadCPU is the CPU time consumed by the calling OS thread.
func threadCPU() time.Duration {
	var ts syscall.Timespec
	// CLOCK_THREAD_CPUTIME_ID = 3
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}

// ---- FindMatches latency --------------------------------------------------

// scenario is an index plus the prompts to query it with.
type scenario struct {
	ix      *Index
	queries [][]kv.BlockHash
}

// rampScenario is the llm-d anchor's shape: worker i holds the first
// (i+1)*step blocks of one 8,192-block prompt (every depth distinct: the
// worst case for a bisection).
func rampScenario(workers int) scenario {
	const D = 8192
	p := chain(D, 42)
	ix := New(Config{})
	step := D / workers
	for w := 0; w < workers; w++ {
		_ = ix.Apply(workerNames[w], 0, kv.Event{Kind: kv.Stored, Blocks: p[:(w+1)*step]})
	}
	return scenario{ix: ix, queries: [][]kv.BlockHash{p}}
}

// realisticScenario: a fleet serving long agentic sessions. Every worker holds
// a 512-block system prompt; sessions are 8,192-block prompts that branch off
// it, each resident on a few workers to a random depth (a session moved or
// partly evicted), and every worker holds other sessions of its own. Queries
// are the sessions' next turns. With tiers, each holder's deeper part of a
// session has been demoted to host (Stored on host, then Removed on device),
// and every other holder's host copy has lost a block in the middle, so
// lookups meet lower-tier holders and non-rooted ones.
func realisticScenario(workers int, rng *rand.Rand, tiers bool) scenario {
	const D, sys = 8192, 512
	system := chain(sys, 7)
	ix := New(Config{})
	for w := 0; w < workers; w++ {
		_ = ix.Apply(workerNames[w], 0, kv.Event{Kind: kv.Stored, Blocks: system})
	}
	sessions := 16
	var queries [][]kv.BlockHash
	for s := 0; s < sessions; s++ {
		p := append(slices.Clone(system), extend(system[sys-1], D-sys, uint64(1000+s))...)
		holders := 1 + rng.IntN(4)
		for h := 0; h < holders; h++ {
			w := rng.IntN(workers)
			depth := sys + rng.IntN(D-sys+1)
			if h == 0 {
				depth = D - rng.IntN(64) // the owner has nearly all of it
			}
			_ = ix.Apply(workerNames[w], 0, kv.Event{Kind: kv.Stored, Parent: system[sys-1], Blocks: p[sys:depth]})
			if !tiers || depth == sys {
				continue
			}
			cut := sys + 1 + rng.IntN(depth-sys)
			_ = ix.Apply(workerNames[w], 0, kv.Event{Kind: kv.Stored, Tier: kv.TierHost, Parent: p[cut-1], Blocks: p[cut:depth]})
			_ = ix.Apply(workerNames[w], 0, kv.Event{Kind: kv.Removed, Tier: kv.TierDevice, Blocks: p[cut:depth]})
			if h%2 == 1 && depth-cut > 2 {
				mid := cut + 1 + rng.IntN(depth-cut-2)
				_ = ix.Apply(workerNames[w], 0, kv.Event{Kind: kv.Removed, Tier: kv.TierHost, Blocks: p[mid : mid+1]})
			}
		}
		queries = append(queries, p)
	}
	// Background: every worker holds 4 sessions of 512 blocks of its own.
	for w := 0; w < workers; w++ {
		for k := 0; k < 4; k++ {
			_ = ix.Apply(workerNames[w], 0, kv.Event{Kind: kv.Stored, Parent: system[sys-1],
				Blocks: extend(system[sys-1], 512, uint64(w*10+k+1)<<20)})
		}
	}
	return scenario{ix: ix, queries: queries}
}

// extend returns n blocks chained after parent.
func extend(parent kv.BlockHash, n int, seed uint64) []kv.BlockHash {
	out := make([]kv.BlockHash, n)
	for i := range out {
		out[i] = kvhash.Chain(parent, kv.LocalHash(seed*1_000_003+uint64(i)+1))
		parent = out[i]
	}
	return out
}

// BenchmarkFindMatches records every call's duration and reports p50/p99.
func BenchmarkFindMatches(b *testing.B) {
	for _, workers := range []int{64, 1024} {
		for _, shape := range []string{"realistic", "ramp", "tiered"} {
			b.Run(fmt.Sprintf("%s/blocks=8192/workers=%d", shape, workers), func(b *testing.B) {
				var sc scenario
				rng := rand.New(rand.NewPCG(uint64(workers), 1))
				switch shape {
				case "ramp":
					sc = rampScenario(workers)
				case "realistic":
					sc = realisticScenario(workers, rng, false)
				default:
					sc = realisticScenario(workers, rng, true)
				}
				measureFind(b, sc, FindOptions{})
			})
		}
	}
}

// BenchmarkFindMatchesPredicted is the realistic lookup with predictions
// counted: a burst of 256 live predictions (each session prompt predicted
// on a few workers at assorted lengths, the rest for prompts of their own).
func BenchmarkFindMatchesPredicted(b *testing.B) {
	rng := rand.New(rand.NewPCG(64, 1))
	sc := realisticScenario(64, rng, false)
	now := time.Unix(1_800_000_000, 0)
	for k := 0; k < 256; k++ {
		var p []kv.BlockHash
		if k < 64 {
			q := sc.queries[k%len(sc.queries)]
			p = q[:1+rng.IntN(len(q))]
		} else {
			p = chain(512+rng.IntN(4096), uint64(k)+5000)
		}
		if err := sc.ix.Predict(now, workerNames[rng.IntN(64)], 0, 0, p, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("realistic/blocks=8192/workers=64/predictions=256", func(b *testing.B) {
		measureFind(b, sc, FindOptions{Predicted: true, Now: now})
	})
}

// measureFind runs the scenario's queries and reports latency percentiles.
func measureFind(b *testing.B, sc scenario, opt FindOptions) {
	var m Matches
	durs := make([]time.Duration, 0, 1<<16)
	cpus := make([]time.Duration, 0, 1<<16)
	undisturbed := make([]time.Duration, 0, 1<<16)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	probes := 0
	runtime.GC()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		q := sc.queries[i%len(sc.queries)]
		i++
		s0 := contextSwitches()
		c0 := threadCPU()
		t0 := time.Now()
		sc.ix.FindMatchesWith(&m, q, opt)
		d := time.Since(t0)
		durs = append(durs, d)
		cpus = append(cpus, threadCPU()-c0)
		if contextSwitches() == s0 {
			undisturbed = append(undisturbed, d)
		}
		probes += m.Probes
	}
	raw := slices.Clone(durs)
	slices.Sort(durs)
	slices.Sort(cpus)
	slices.Sort(undisturbed)
	pct := func(d []time.Duration, p float64) float64 {
		return float64(d[min(len(d)-1, int(p*float64(len(d))))].Nanoseconds()) / 1e3
	}
	// Wall-clock percentiles, and the same for this thread's CPU
	// time (not inflated by preemption on a busy machine; includes
	// ~0.3 µs of clock_gettime cost).
	b.ReportMetric(pct(durs, 0.50), "p50-µs")
	b.ReportMetric(pct(durs, 0.99), "p99-µs")
	b.ReportMetric(pct(cpus, 0.50), "cpu-p50-µs")
	b.ReportMetric(pct(cpus, 0.99), "cpu-p99-µs")
	// Wall-clock percentiles of the calls during which this thread was
	// not switched out (the kernel's context-switch counters did not
	// move): the lookup's own tail, without the scheduler's.
	if len(undisturbed) > 0 {
		b.ReportMetric(pct(undisturbed, 0.99), "undisturbed-p99-µs")
		b.ReportMetric(100*float64(len(undisturbed))/float64(len(durs)), "undisturbed-%")
	}
	// p99 of the quietest round of 1,000 consecutive calls: what the
	// index costs when the machine is not preempting us.
	best := time.Duration(1 << 62)
	for r := 0; r+1000 <= len(raw); r += 1000 {
		round := slices.Clone(raw[r : r+1000])
		slices.Sort(round)
		best = min(best, round[989])
	}
	if best < 1<<62 {
		b.ReportMetric(float64(best.Nanoseconds())/1e3, "best-round-p99-µs")
	}
	b.ReportMetric(float64(probes)/float64(len(durs)), "probes/op")
}

// ---- Memory per entry -----------------------------------------------------

func heapNow() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkMemoryPerEntry builds indexes and reports live heap per
// (block, worker) entry; one iteration is enough (-benchtime=1x).
func BenchmarkMemoryPerEntry(b *testing.B) {
	cases := []struct {
		name  string
		build func(tb testing.TB) *Index
	}{
		{"mooncake-64w", func(tb testing.TB) *Index {
			evs, _ := mooncakeEvents(tb)
			ix := New(Config{})
			for _, we := range evs {
				_ = ix.Apply(workerNames[we.worker], 0, we.ev)
			}
			return ix
		}},
		{"shared6000+unique2192-64w", func(tb testing.TB) *Index {
			ix := New(Config{})
			shared := chain(6000, 3)
			for w := 0; w < 64; w++ {
				_ = ix.Apply(workerNames[w], 0, kv.Event{Kind: kv.Stored, Blocks: shared})
				_ = ix.Apply(workerNames[w], 0, kv.Event{Kind: kv.Stored, Parent: shared[5999],
					Blocks: extend(shared[5999], 2192, uint64(w+1)<<24)})
			}
			return ix
		}},
		{"ramp-1024w", func(tb testing.TB) *Index { return rampScenario(1024).ix }},
		{"unique-chains-64w", func(tb testing.TB) *Index {
			ix := New(Config{})
			for w := 0; w < 64; w++ {
				_ = ix.Apply(workerNames[w], 0, kv.Event{Kind: kv.Stored, Blocks: chain(8192, uint64(w)+100)})
			}
			return ix
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			if c.name == "mooncake-64w" {
				mooncakeEvents(b) // generate outside the measurement
			}
			for b.Loop() {
				before := heapNow()
				ix := c.build(b)
				after := heapNow()
				st := ix.Stats()
				b.ReportMetric(float64(after-before)/float64(st.TotalEntries()), "B/entry")
				b.ReportMetric(float64(st.TotalEntries()), "entries")
				b.ReportMetric(float64(st.Blocks), "blocks")
				runtime.KeepAlive(ix)
			}
		})
	}
}
