package enginesim

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvhash"
)

// cpuTime is the CPU time this process has used. The figures of issue 3 are
// per core: on a shared machine wall time also counts time spent waiting for
// a CPU, so the benchmarks report both (the "/cpu-s" metrics divide by
// process CPU time, which includes the garbage collector's).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuMeter measures CPU time across the timed parts of a benchmark.
type cpuMeter struct {
	start time.Duration
	total time.Duration
}

func (m *cpuMeter) resume() { m.start = cpuTime() }
func (m *cpuMeter) pause()  { m.total += cpuTime() - m.start }

// BenchmarkAdmitCachedPrompt measures goal (a) of issue 3: prompt tokens
// admitted per second for a long prompt whose prefix is cached. Each
// iteration adds a prompt sharing the cached prefix with a fresh suffix and
// steps until its first (and only) token; tokens/s is reported as
// prompt-tokens/s.
func BenchmarkAdmitCachedPrompt(b *testing.B) {
	for _, size := range []int{10_000, 100_000} {
		for _, hitPct := range []int{95} {
			b.Run(fmt.Sprintf("prompt=%d/hit=%d%%", size, hitPct), func(b *testing.B) {
				const bs = 16
				e, err := New(Config{NumGPUBlocks: 4 * size / bs, MaxNumBatchedTokens: size})
				if err != nil {
					b.Fatal(err)
				}
				prompt := make([]uint32, size)
				for i := range prompt {
					prompt[i] = uint32(i * 7)
				}
				base := kvhash.New(bs, "", "").Blocks(prompt)
				shared := len(base) * hitPct / 100
				// Warm the prefix.
				if err := e.Add(Request{ID: "warm", Prompt: prompt, BlockHashes: base, MaxTokens: 1}); err != nil {
					b.Fatal(err)
				}
				for e.HasWork() {
					e.Step()
				}
				variants := make([][]kv.BlockHash, 64)
				for v := range variants {
					hs := append([]kv.BlockHash(nil), base...)
					for i := shared; i < len(hs); i++ {
						hs[i] ^= kv.BlockHash(v+1) << 40
					}
					variants[v] = hs
				}
				before := e.Stats()
				ids := make([]string, b.N)
				for i := range ids {
					ids[i] = fmt.Sprintf("r%d", i)
				}
				var cpu cpuMeter
				b.ReportAllocs()
				b.ResetTimer()
				cpu.resume()
				for i := 0; i < b.N; i++ {
					err := e.Add(Request{ID: ids[i], Prompt: prompt, BlockHashes: variants[i%len(variants)], MaxTokens: 1})
					if err != nil {
						b.Fatal(err)
					}
					for e.HasWork() {
						e.Step()
					}
				}
				b.StopTimer()
				cpu.pause()
				b.ReportMetric(float64(size)*float64(b.N)/b.Elapsed().Seconds(), "prompt-tokens/s")
				b.ReportMetric(float64(size)*float64(b.N)/cpu.total.Seconds(), "prompt-tokens/cpu-s")
				st := e.Stats()
				hits, queries := st.PrefixHitTokens-before.PrefixHitTokens, st.PrefixQueryTokens-before.PrefixQueryTokens
				if hit := float64(hits) / float64(queries); hit < float64(hitPct-2)/100 {
					b.Fatalf("hit rate %.3f, want about %d%%", hit, hitPct)
				}
			})
		}
	}
}

// BenchmarkDecodeStep measures goal (b) of issue 3: scheduler steps per
// second with a full batch of sequences in decode.
func BenchmarkDecodeStep(b *testing.B) {
	for _, seqs := range []int{32, 256} {
		b.Run(fmt.Sprintf("seqs=%d", seqs), func(b *testing.B) {
			const (
				bs       = 16
				prompt   = 256
				perRound = 1024 // decode steps before the batch is refilled
			)
			e, err := New(Config{NumGPUBlocks: seqs * (prompt + perRound + 64 + bs) / bs, MaxNumSeqs: seqs})
			if err != nil {
				b.Fatal(err)
			}
			round := 0
			refill := func() {
				for i := range seqs {
					p := make([]uint32, prompt)
					for j := range p {
						p[j] = uint32(round*seqs + i + j)
					}
					if err := e.Add(Request{ID: fmt.Sprintf("r%d-%d", round, i), Prompt: p, MaxTokens: perRound + 64, OutputLen: perRound + 64}); err != nil {
						b.Fatal(err)
					}
				}
				for n := 0; e.Stats().Running < seqs || e.Stats().Waiting > 0; n++ {
					if n > 1000 {
						b.Fatal("the batch never fills: cache too small for the benchmark")
					}
					e.Step()
				}
				e.Step() // all in decode from here
			}
			drain := func() {
				for slot := range e.reqs {
					if q := &e.reqs[slot]; q.state != stateFree {
						e.Abort(q.id)
					}
				}
			}
			refill()
			runtime.GC() // as after each refill below
			var cpu cpuMeter
			b.ReportAllocs()
			b.ResetTimer()
			cpu.resume()
			for i := 0; i < b.N; i++ {
				if i > 0 && i%perRound == 0 {
					b.StopTimer()
					cpu.pause()
					drain()
					round++
					refill()
					// Collect the refill's garbage here, so that its
					// collection is not charged to the timed steps.
					runtime.GC()
					cpu.resume()
					b.StartTimer()
				}
				if res := e.Step(); res.DecodeRequests != seqs {
					b.Fatalf("step %d decoded %d requests, want %d", i, res.DecodeRequests, seqs)
				}
			}
			b.StopTimer()
			cpu.pause()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
			b.ReportMetric(float64(b.N)/cpu.total.Seconds(), "steps/cpu-s")
		})
	}
}

// BenchmarkAgentSessions replays agent-shaped traffic on virtual time: 4
// sessions whose turns grow by 2,000 tokens of tool output each (prefix hits
// on the previous turn) up to ~100k tokens, 200 output tokens per turn, on a
// default-sized cache (262k tokens: four long sessions just fit, with some
// eviction near the top). It reports how
// many turns and prompt tokens the simulator gets through per second, and
// how much faster than real time it runs.
func BenchmarkAgentSessions(b *testing.B) {
	const (
		sessions  = 4
		growth    = 2000
		output    = 200
		maxPrompt = 100_000
	)
	e, err := New(Config{Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	bs := e.Config().BlockSize
	type session struct {
		id      string
		context []uint32
		hashes  []kv.BlockHash
		turn    int
		pending string
	}
	ss := make([]*session, sessions)
	hasher := kvhash.New(bs, "", "")
	next := uint32(0)
	grow := func(s *session, extra []uint32) {
		s.context = append(s.context, extra...)
		if len(s.context) > maxPrompt { // a new conversation: start over
			s.context, s.hashes = s.context[:0], s.hashes[:0]
			s.context = append(s.context, extra...)
		}
		s.hashes = hasher.Extend(s.hashes, s.context) // only the new blocks are hashed
	}
	fresh := func(n int) []uint32 {
		out := make([]uint32, n)
		for i := range out {
			next++
			out[i] = next
		}
		return out
	}
	for i := range ss {
		ss[i] = &session{id: fmt.Sprintf("s%d", i)}
		grow(ss[i], fresh(growth))
	}
	outs := map[string][]uint32{}
	owner := map[string]*session{}
	var turns, promptTokens int64
	var simulated time.Duration
	var cpu cpuMeter
	b.ReportAllocs()
	b.ResetTimer()
	cpu.resume()
	for i := 0; i < b.N; i++ {
		// Every idle session sends its next turn.
		for _, s := range ss {
			if s.pending != "" {
				continue
			}
			s.turn++
			s.pending = fmt.Sprintf("%s-t%d", s.id, s.turn)
			owner[s.pending] = s
			err := e.Add(Request{ID: s.pending, SessionID: s.id, Prompt: s.context, BlockHashes: s.hashes[:len(s.context)/bs], MaxTokens: output, IgnoreEOS: true})
			if err != nil {
				b.Fatal(err)
			}
			promptTokens += int64(len(s.context))
		}
		res := e.Step()
		simulated += res.Duration
		for _, o := range res.Outputs {
			outs[o.RequestID] = append(outs[o.RequestID], o.Token)
			if o.Finish != FinishNone {
				s := owner[o.RequestID]
				delete(owner, o.RequestID)
				grow(s, append(outs[o.RequestID], fresh(growth)...))
				delete(outs, o.RequestID)
				s.pending = ""
				turns++
			}
		}
	}
	b.StopTimer()
	cpu.pause()
	st := e.Stats()
	b.ReportMetric(float64(turns)/cpu.total.Seconds(), "turns/cpu-s")
	b.ReportMetric(float64(promptTokens)/cpu.total.Seconds(), "prompt-tokens/cpu-s")
	b.ReportMetric(simulated.Seconds()/cpu.total.Seconds(), "x-realtime")
	if b.N > 1000 && st.PrefixHitTokens == 0 {
		b.Fatal("no prefix reuse")
	}
	b.ReportMetric(float64(st.PrefixHitTokens)/float64(max(st.PrefixQueryTokens, 1)), "hit-rate")
}
