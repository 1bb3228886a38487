package hints_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"switchyard.dev/pkg/enginesim"
	"switchyard.dev/pkg/hints"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/sessionindex"
)

// This file measures what the hint policies do to one simulated worker
// under agent-shaped load: the three pure cores wired together on virtual
// time (enginesim publishes KV events → sessionindex builds lineage →
// hints decides from lifecycle → enginesim applies the hints). It is a
// benchmark because its output is a measurement, not a pass/fail rule:
//
//	go test ./hints -run '^$' -bench HintsEffect -benchtime 1x
//
// The service-level experiment across a fleet belongs to the replay
// harness; this one isolates the policies on one engine.

type agentSession struct {
	id        string
	prompt    []uint32
	output    []uint32
	turnsLeft int
	next      time.Time // when its next turn is sent (while acting)
	running   bool
	sentAt    time.Time
	prevLen   int // context the previous turn ended with
	rng       *rand.Rand
}

type effect struct {
	turns, reprefill, cached, prompt int
	ttft                             time.Duration
	hintsSent                        map[string]int
	results                          map[hints.Result]int
}

// view adapts the lineage index and the engine's occupancy for the policies.
type effectView struct {
	idx *sessionindex.Index
	eng *enginesim.Engine
}

func (v effectView) Lineage(s, w string) ([]sessionindex.Chain, error) {
	return v.idx.Lineage(s, w), nil
}
func (v effectView) KVUsage(string) (float64, bool) {
	return v.eng.Stats().KVUsage, true
}

func runAgents(b *testing.B, withHints bool, disabled []string, factor float64, seed uint64) effect {
	const (
		worker       = "w0"
		concurrent   = 12
		totalAgents  = 60
		systemTokens = 1024
	)
	eng, err := enginesim.New(enginesim.Config{WorkerID: worker, NumGPUBlocks: 2048, HostBlocks: 2048, Seed: int64(seed)})
	if err != nil {
		b.Fatal(err)
	}
	idx := sessionindex.New(sessionindex.Config{})
	cfg := hints.DefaultConfig()
	cfg.Disabled = disabled
	cfg.LongToolFactor = factor
	pol := hints.New(cfg)
	view := effectView{idx: idx, eng: eng}
	rng := rand.New(rand.NewPCG(seed, 7))
	system := make([]uint32, systemTokens)
	for i := range system {
		system[i] = uint32(rng.IntN(30000) + 2000)
	}
	now := time.Unix(0, 0)
	res := effect{hintsSent: map[string]int{}, results: map[hints.Result]int{}}
	started := 0
	var live []*agentSession
	newSession := func() *agentSession {
		started++
		s := &agentSession{id: fmt.Sprintf("agent-%d", started), turnsLeft: 4 + rng.IntN(6), next: now, rng: rand.New(rand.NewPCG(seed, uint64(started)))}
		s.prompt = append(append([]uint32{}, system...), toolTokens(s.rng, 200+s.rng.IntN(800))...)
		return s
	}
	for range concurrent {
		live = append(live, newSession())
	}
	observe := func(s *agentSession, ph hints.Phase, lc hints.Lifecycle) {
		if withHints {
			pol.Observe(now, hints.Program{Session: s.id, Phase: ph, Lifecycle: lc, Worker: worker, PhaseSince: now})
		}
	}
	feed := func(evs []kv.Event) {
		for _, ev := range evs {
			_ = idx.Apply(worker, ev, now)
		}
	}
	byID := map[string]*agentSession{}
	reqSeq := 0
	for len(live) > 0 {
		// Send every turn that is due.
		for _, s := range live {
			if s.running || s.next.After(now) {
				continue
			}
			reqSeq++
			rid := fmt.Sprintf("r%d", reqSeq)
			if err := eng.Add(enginesim.Request{ID: rid, SessionID: s.id, Prompt: s.prompt, OutputLen: 48 + s.rng.IntN(160)}); err != nil {
				b.Fatal(err)
			}
			byID[rid] = s
			s.running, s.sentAt, s.output = true, now, s.output[:0]
			observe(s, hints.PhaseReasoning, hints.LifecycleActive)
		}
		if withHints {
			for _, a := range pol.Decide(now, view) {
				o := eng.ApplyHint(enginesim.Hint{Kind: a.Kind, SessionID: a.Session, Blocks: a.Blocks})
				feed(o.Events)
				r := o.Status
				pol.Outcome(a, r)
				res.hintsSent[a.Policy]++
				res.results[r]++
			}
		}
		if !eng.HasWork() {
			// Idle until the next tool call ends.
			next := time.Time{}
			for _, s := range live {
				if !s.running && (next.IsZero() || s.next.Before(next)) {
					next = s.next
				}
			}
			// Tick like the emitter does, so time-driven policies fire.
			now = minTime(next, now.Add(250*time.Millisecond))
			continue
		}
		step := eng.Step()
		now = now.Add(step.Duration)
		feed(step.Events)
		for _, o := range step.Outputs {
			s := byID[o.RequestID]
			s.output = append(s.output, o.Token)
			if o.First {
				res.ttft += now.Sub(s.sentAt)
			}
			if o.Finish == enginesim.FinishNone {
				continue
			}
			delete(byID, o.RequestID)
			u := o.Usage
			res.turns++
			res.prompt += u.PromptTokens
			res.cached += u.CachedTokens
			// Tokens of the previous turn's context computed again.
			res.reprefill += max(0, min(s.prevLen, u.PromptTokens)-u.CachedTokens)
			s.running = false
			s.turnsLeft--
			if s.turnsLeft == 0 {
				observe(s, hints.PhaseReasoning, hints.LifecycleTerminated)
				s.turnsLeft = -1
				continue
			}
			// Next turn: the context grows by the answer and a tool result.
			s.prompt = append(append(s.prompt, s.output...), toolTokens(s.rng, 300+s.rng.IntN(1500))...)
			s.prevLen = u.PromptTokens + u.CompletionTokens
			s.next = now.Add(toolTime(s.rng))
			observe(s, hints.PhaseActing, hints.LifecycleActive)
		}
		// Finished sessions make room for new ones.
		kept := live[:0]
		for _, s := range live {
			if s.turnsLeft >= 0 {
				kept = append(kept, s)
				continue
			}
			if started < totalAgents {
				kept = append(kept, newSession())
			}
		}
		live = kept
	}
	return res
}

// toolTime: most tool calls are quick, some (builds, test runs) are long.
func toolTime(r *rand.Rand) time.Duration {
	if r.IntN(4) == 0 {
		return time.Duration(10+r.IntN(50)) * time.Second
	}
	return time.Duration(200+r.IntN(3000)) * time.Millisecond
}

func toolTokens(r *rand.Rand, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(r.IntN(30000) + 2000)
	}
	return out
}

func minTime(a, b time.Time) time.Time {
	if !a.IsZero() && a.Before(b) {
		return a
	}
	return b
}

func BenchmarkHintsEffect(b *testing.B) {
	variants := []struct {
		name     string
		on       bool
		disabled []string
		factor   float64
	}{
		{"hints=off", false, nil, 1},
		{"hints=defaults", true, hints.DefaultConfig().Disabled, 1},
		{"hints=all", true, nil, 1},
		{"hints=release_only", true, []string{hints.PolicyDemoteLongTool, hints.PolicyDemotePaused, hints.PolicyPrefetchResume, hints.PolicyShareSubagent}, 1},
		{"hints=demote+prefetch", true, []string{hints.PolicyReleaseFinished, hints.PolicyShareSubagent}, 1},
		{"hints=demote+prefetch,factor=4", true, []string{hints.PolicyReleaseFinished, hints.PolicyShareSubagent}, 4},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			var r effect
			for i := 0; i < b.N; i++ {
				r = runAgents(b, v.on, v.disabled, v.factor, 1)
			}
			b.ReportMetric(float64(r.reprefill), "reprefilled_tokens")
			b.ReportMetric(float64(r.cached)/float64(max(1, r.prompt)), "hit_rate")
			b.ReportMetric(float64(r.ttft.Milliseconds())/float64(max(1, r.turns)), "ttft_ms")
			b.ReportMetric(float64(r.turns), "turns")
			if v.on {
				b.Logf("hints sent %v, results %v", r.hintsSent, r.results)
			}
		})
	}
}
