package llmd

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/llm-d/llm-d-kv-cache/pkg/kvcache"
	"github.com/llm-d/llm-d-kv-cache/pkg/kvcache/kvblock"
	"k8s.io/apimachinery/pkg/util/sets"

	"switchyard.dev/pkg/flashindex"
	"switchyard.dev/pkg/kv"
)

// system is one index under test, behind the operations both support.
type system interface {
	store(worker int, ev kv.Event)
	remove(worker int, ev kv.Event)
	// match returns each worker's longest device prefix of the prompt.
	match(prompt []kv.BlockHash) map[string]int
}

// ours is Switchyard's flash index.
type ours struct{ ix *flashindex.Index }

func newOurs() *ours { return &ours{ix: flashindex.New(flashindex.Config{})} }

func (o *ours) store(w int, ev kv.Event)  { _ = o.ix.Apply(podNames[w], 0, ev) }
func (o *ours) remove(w int, ev kv.Event) { _ = o.ix.Apply(podNames[w], 0, ev) }
func (o *ours) match(p []kv.BlockHash) map[string]int {
	m := o.ix.FindMatches(p)
	out := make(map[string]int, len(m.Workers))
	for _, w := range m.Workers {
		out[w.Worker] = w.Device
	}
	return out
}

// theirs is llm-d's InMemoryIndex as released (v0.9.0), with the
// LongestPrefixScorer that turns its per-key answer into per-pod depths.
// Stored blocks are added with engineKeys=nil (no engine→request mapping:
// their cheapest path) and removed by request key.
type theirs struct {
	idx    *kvblock.InMemoryIndex
	scorer kvcache.KVBlockScorer
	keys   []kvblock.BlockHash
}

func newTheirs(pods int) *theirs {
	cfg := kvblock.DefaultInMemoryIndexConfig()
	cfg.PodCacheSize = max(pods, cfg.PodCacheSize) // default 10 would silently evict pods
	idx, err := kvblock.NewInMemoryIndex(cfg)
	if err != nil {
		panic(err)
	}
	sc, err := kvcache.NewKVBlockScorer(kvcache.DefaultKVBlockScorerConfig())
	if err != nil {
		panic(err)
	}
	return &theirs{idx: idx, scorer: sc}
}

func (t *theirs) conv(bs []kv.BlockHash) []kvblock.BlockHash {
	t.keys = t.keys[:0]
	for _, b := range bs {
		t.keys = append(t.keys, kvblock.BlockHash(b))
	}
	return t.keys
}

func (t *theirs) store(w int, ev kv.Event) {
	_ = t.idx.Add(context.Background(), nil, t.conv(ev.Blocks), []kvblock.PodEntry{{PodIdentifier: podNames[w], DeviceTier: "gpu"}})
}

func (t *theirs) remove(w int, ev kv.Event) {
	e := []kvblock.PodEntry{{PodIdentifier: podNames[w], DeviceTier: "gpu"}}
	for _, b := range ev.Blocks {
		_ = t.idx.Evict(context.Background(), kvblock.BlockHash(b), kvblock.RequestKey, e)
	}
}

func (t *theirs) match(p []kv.BlockHash) map[string]int {
	ctx := context.Background()
	keys := slices.Clone(t.conv(p))
	found, err := t.idx.Lookup(ctx, keys, sets.Set[string]{})
	if err != nil {
		panic(err)
	}
	scores, err := t.scorer.Score(ctx, keys, found)
	if err != nil {
		panic(err)
	}
	out := make(map[string]int, len(scores))
	for pod, s := range scores {
		out[pod] = int(s) // gpu weight 1.0: the score is the depth
	}
	return out
}

var systems = []struct {
	name string
	make func(pods int) system
}{
	{"switchyard", func(int) system { return newOurs() }},
	{"llm-d", func(pods int) system { return newTheirs(pods) }},
}

// TestSameAnswers checks both systems agree on the inputs the benchmarks
// use, so the comparison is of equal work.
func TestSameAnswers(t *testing.T) {
	p := rampPrompt()
	var got [2]map[string]int
	for i, s := range systems {
		sys := s.make(64)
		buildRamp(sys, p, 64)
		got[i] = sys.match(p)
	}
	if fmt.Sprint(got[0]) != fmt.Sprint(got[1]) {
		t.Fatalf("answers differ:\n%v\n%v", got[0], got[1])
	}
	if got[0]["worker-63"] != 8192 || got[0]["worker-0"] != 128 {
		t.Fatalf("unexpected depths %v", got[0])
	}
}

func buildRamp(sys system, p []kv.BlockHash, pods int) {
	step := len(p) / pods
	for w := 0; w < pods; w++ {
		sys.store(w, kv.Event{Kind: kv.Stored, Blocks: p[:(w+1)*step]})
	}
}

// BenchmarkApplyMooncake replays the same KV events into each system.
func BenchmarkApplyMooncake(b *testing.B) {
	evs, blocks, err := mooncakeEvents()
	if err != nil {
		b.Skip(err)
	}
	for _, s := range systems {
		b.Run("system="+s.name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var wall, cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				sys := s.make(64)
				runtime.GC()
				b.StartTimer()
				t0, c0 := time.Now(), threadCPU()
				for _, we := range evs {
					if we.ev.Kind == kv.Stored {
						sys.store(we.worker, we.ev)
					} else {
						sys.remove(we.worker, we.ev)
					}
				}
				wall += time.Since(t0)
				cpu += threadCPU() - c0
			}
			b.ReportMetric(float64(blocks)*float64(b.N)/wall.Seconds(), "block-events/s")
			b.ReportMetric(float64(blocks)*float64(b.N)/cpu.Seconds(), "block-events/cpu-s")
			b.ReportMetric(float64(blocks), "block-events/op")
		})
	}
}

// BenchmarkAdd is the anchor's Add shape: 64 pods, a shared 6,000-block
// prefix then 2,192 blocks each of their own, stored 512 blocks per event.
func BenchmarkAdd(b *testing.B) {
	shared := chain(6000, 3)
	own := make([][]kv.BlockHash, 64)
	for w := range own {
		own[w] = append(slices.Clone(shared), extend(shared[5999], 2192, uint64(w+1)<<24)...)
	}
	for _, s := range systems {
		b.Run("system="+s.name, func(b *testing.B) {
			var wall time.Duration
			for b.Loop() {
				b.StopTimer()
				sys := s.make(64)
				runtime.GC()
				b.StartTimer()
				t0 := time.Now()
				for w := range own {
					for i := 0; i < len(own[w]); i += 512 {
						var parent kv.BlockHash
						if i > 0 {
							parent = own[w][i-1]
						}
						sys.store(w, kv.Event{Kind: kv.Stored, Parent: parent, Blocks: own[w][i:min(i+512, len(own[w]))]})
					}
				}
				wall += time.Since(t0)
			}
			b.ReportMetric(float64(64*8192)*float64(b.N)/wall.Seconds(), "entries/s")
		})
	}
}

// BenchmarkLookup: one 8,192-block prompt against the ramp (every pod a
// different depth), per-call durations recorded for p50/p99. For llm-d the
// answer is Lookup + LongestPrefix Score (what yields per-pod depths).
func BenchmarkLookup(b *testing.B) {
	p := rampPrompt()
	for _, pods := range []int{64, 1024} {
		for _, s := range systems {
			b.Run(fmt.Sprintf("pods=%d/system=%s", pods, s.name), func(b *testing.B) {
				sys := s.make(pods)
				buildRamp(sys, p, pods)
				runtime.GC()
				var durs []time.Duration
				for b.Loop() {
					t0 := time.Now()
					m := sys.match(p)
					durs = append(durs, time.Since(t0))
					if len(m) != pods {
						b.Fatalf("%d pods matched, want %d", len(m), pods)
					}
				}
				slices.Sort(durs)
				pct := func(q float64) float64 {
					return float64(durs[min(len(durs)-1, int(q*float64(len(durs))))].Nanoseconds()) / 1e3
				}
				b.ReportMetric(pct(0.5), "p50-µs")
				b.ReportMetric(pct(0.99), "p99-µs")
			})
		}
	}
}

// BenchmarkMemory reports live heap per (block, pod) entry for the Add shape
// and the 1,024-pod ramp (-benchtime=1x).
func BenchmarkMemory(b *testing.B) {
	shared := chain(6000, 3)
	for _, shape := range []string{"add-64", "ramp-1024"} {
		for _, s := range systems {
			b.Run(fmt.Sprintf("shape=%s/system=%s", shape, s.name), func(b *testing.B) {
				for b.Loop() {
					before := heapNow()
					var sys system
					entries := 0
					if shape == "add-64" {
						sys = s.make(64)
						for w := 0; w < 64; w++ {
							sys.store(w, kv.Event{Kind: kv.Stored, Blocks: shared})
							sys.store(w, kv.Event{Kind: kv.Stored, Parent: shared[5999], Blocks: extend(shared[5999], 2192, uint64(w+1)<<24)})
						}
						entries = 64 * 8192
					} else {
						sys = s.make(1024)
						buildRamp(sys, rampPrompt(), 1024)
						entries = 8 * 1024 * 1025 / 2
					}
					after := heapNow()
					b.ReportMetric(float64(after-before)/float64(entries), "B/entry")
					runtime.KeepAlive(sys)
				}
			})
		}
	}
}
