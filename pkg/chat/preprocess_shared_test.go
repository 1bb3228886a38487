package chat

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvhash"
	"switchyard.dev/pkg/tokenizer"
)

// byteEncoder tokenizes a text into its bytes, so that a segment split in
// two, or two segments merged, give the same tokens: the prompts below then
// repeat part of the previous prompt's tail inside a longer segment, as an
// agent's answer repeats the generation prompt, and exercise repeats.
type byteEncoder struct{ specials map[string]uint32 }

func (e *byteEncoder) EncodeOrdinary(text string) []uint32 {
	out := make([]uint32, len(text))
	for i := range len(text) {
		out[i] = uint32(text[i])
	}
	return out
}

func (e *byteEncoder) SpecialID(s string) (uint32, bool) {
	id, ok := e.specials[s]
	return id, ok
}

// sharedNode is one turn: its prompt, the Session and Tokenized it got, and
// copies of them taken at once, to check later that nothing changed them.
type sharedNode struct {
	p             Prompt
	s             *Session
	out           Tokenized
	tokens        []uint32
	hashes        []kv.BlockHash
	sTokens       []uint32
	sHashes       []kv.BlockHash
	sEnds         []int
	inPlace       bool
	inPlaceHashes bool
}

func randomSegment(r *rand.Rand) Segment {
	switch k := r.IntN(10); {
	case k < 2:
		return Segment{Text: []string{"<|im_end|>", "<|im_start|>"}[r.IntN(2)], Special: true}
	case k < 4:
		return Segment{Text: []string{"\n", "assistant\n", "user\n", " "}[r.IntN(4)]}
	case k < 8:
		return Segment{Text: strings.Repeat(fmt.Sprintf("w%d ", r.IntN(30)), 1+r.IntN(6))}
	default:
		return Segment{Text: strings.Repeat(fmt.Sprintf("long%d text ", r.IntN(30)), 4+r.IntN(20))}
	}
}

// nextPrompt changes q the ways a session's next prompt does: mostly
// appended to, sometimes with its tail merged into or split from a longer
// segment (same bytes), cut, edited, repeated or replaced.
func nextPrompt(r *rand.Rand, q Prompt) Prompt {
	p := slices.Clone(q)
	add := func(n int) {
		for range n {
			p = append(p, randomSegment(r))
		}
	}
	switch k := r.IntN(20); {
	case k < 8: // the usual turn
		add(1 + r.IntN(4))
	case k < 11 && len(p) > 0: // the tail's text continues in one segment
		j := 1 + r.IntN(min(3, len(p)))
		var b strings.Builder
		for _, s := range p[len(p)-j:] {
			b.WriteString(s.Text) // a special's text, now ordinary: other tokens
		}
		b.WriteString(randomSegment(r).Text)
		p = append(p[:len(p)-j], Segment{Text: b.String()})
		add(r.IntN(2))
	case k < 12 && len(p) > 0: // the last segment split in two
		last := p[len(p)-1]
		if !last.Special && len(last.Text) > 1 {
			i := 1 + r.IntN(len(last.Text)-1)
			p = append(p[:len(p)-1], Segment{Text: last.Text[:i]}, Segment{Text: last.Text[i:]})
		}
		add(r.IntN(3))
	case k < 14 && len(p) > 0: // cut (compaction), maybe more after
		p = p[:r.IntN(len(p))]
		add(r.IntN(3))
	case k < 16 && len(p) > 0: // an edit
		i := r.IntN(len(p))
		p[i] = Segment{Text: p[i].Text + "edited"}
	case k < 17: // the same prompt again (a retry)
	case k < 18: // the last few tokens' segment cut short
		if len(p) > 0 && !p[len(p)-1].Special && len(p[len(p)-1].Text) > 1 {
			last := p[len(p)-1]
			p[len(p)-1] = Segment{Text: last.Text[:len(last.Text)-1]}
		}
	default: // a new prompt
		p = nil
		add(1 + r.IntN(6))
	}
	return p
}

func sameArray[T any](a, b []T) bool {
	return cap(a) > 0 && cap(b) > 0 && unsafe.SliceData(a) == unsafe.SliceData(b)
}

// TestPreprocessSharedArraysConcurrent is a randomized differential test of
// appending in place: goroutines prepare turns at once from the same and
// from different Sessions (branches, retries, turns from an older Session
// after a newer one appended, prompts that shrink, kept > 0), and every
// turn's tokens and hashes must equal a cold run's, and no earlier turn's
// Tokenized or Session may change. Run it with -race.
func TestPreprocessSharedArraysConcurrent(t *testing.T) {
	encs := []Encoder{
		&byteEncoder{specials: map[string]uint32{"<|im_end|>": 1000, "<|im_start|>": 1001}},
		tokenizer.Default(),
	}
	var inPlace, inPlaceHashes, copies, turns atomic.Int64
	seeds := uint64(24)
	if testing.Short() {
		seeds = 6
	}
	for seed := range seeds {
		r := rand.New(rand.NewPCG(seed, 99))
		enc := encs[seed%2]
		h := kvhash.New([]int{1, 3, 4, 16}[r.IntN(4)], "", "")
		var pool []*sharedNode
		record := func(p Prompt, out Tokenized, s *Session) *sharedNode {
			return &sharedNode{p: p, s: s, out: out, tokens: slices.Clone(out.Tokens), hashes: slices.Clone(out.Hashes),
				sTokens: slices.Clone(s.tokens), sHashes: slices.Clone(s.hashes), sEnds: slices.Clone(s.ends)}
		}
		var p0 Prompt
		for range 1 + r.IntN(4) {
			p0 = append(p0, randomSegment(r))
		}
		out, s := Preprocess(enc, h, p0, nil)
		pool = append(pool, record(p0, out, s))
		const workers = 8
		for round := range 40 {
			// Each worker's prev: often the latest turn (so that several
			// race on it), else any earlier one.
			type job struct {
				prev *sharedNode
				p    Prompt
				kept int
				seed uint64
			}
			jobs := make([]job, workers)
			hot := pool[len(pool)-1]
			for i := range jobs {
				prev := hot
				if r.IntN(3) == 0 {
					prev = pool[r.IntN(len(pool))]
				}
				p := nextPrompt(r, prev.p)
				same := 0
				for same < min(len(p), len(prev.p)) && p[same] == prev.p[same] {
					same++
				}
				jobs[i] = job{prev: prev, p: p, kept: r.IntN(same + 1), seed: r.Uint64()}
			}
			results := make([]*sharedNode, workers)
			var start, done sync.WaitGroup
			start.Add(1)
			for i, j := range jobs {
				done.Add(1)
				go func() {
					defer done.Done()
					start.Wait()
					out, next := preprocess(enc, h, j.p, j.kept, j.prev.s)
					n := record(j.p, out, next)
					n.inPlace = len(j.prev.s.tokens) > 0 && sameArray(next.tokens, j.prev.s.tokens)
					n.inPlaceHashes = len(j.prev.s.hashes) > 0 && sameArray(next.hashes, j.prev.s.hashes)
					results[i] = n
					cold, _ := Preprocess(enc, h, j.p, nil)
					if !slices.Equal(out.Tokens, cold.Tokens) || !slices.Equal(out.Hashes, cold.Hashes) {
						t.Errorf("seed %d round %d worker %d (kept %d): warm differs from cold\nwarm %v\ncold %v",
							seed, round, i, j.kept, out.Tokens, cold.Tokens)
					}
					if !slices.Equal(next.tokens, out.Tokens) || !slices.Equal(next.hashes, out.Hashes) {
						t.Errorf("seed %d round %d worker %d: Session differs from its Tokenized", seed, round, i)
					}
					if cap(out.Tokens) != len(out.Tokens) || cap(out.Hashes) != len(out.Hashes) ||
						cap(next.Tokens()) != len(next.tokens) {
						t.Errorf("seed %d round %d worker %d: a slice handed out has room past its length", seed, round, i)
					}
					if out.ReusedTokens > commonPrefix(j.prev.s.tokens, out.Tokens) {
						t.Errorf("seed %d round %d worker %d: reused %d tokens beyond the common prefix", seed, round, i, out.ReusedTokens)
					}
					// The segments' ends, which the next turn's reuse relies on.
					for k := range j.p {
						if !slices.Equal(next.segment(k), encodeSegment(enc, j.p[k])) {
							t.Errorf("seed %d round %d worker %d: segment %d's tokens are not its own", seed, round, i, k)
							break
						}
					}
				}()
			}
			start.Done()
			done.Wait()
			for _, n := range results {
				turns.Add(1)
				switch {
				case n.inPlace:
					inPlace.Add(1)
				default:
					copies.Add(1)
				}
				if n.inPlaceHashes {
					inPlaceHashes.Add(1)
				}
			}
			pool = append(pool, results...)
			// Nothing handed out before is changed, and every Session is
			// within what its arrays' extents have claimed.
			for k, n := range pool {
				if !slices.Equal(n.out.Tokens, n.tokens) || !slices.Equal(n.out.Hashes, n.hashes) ||
					!slices.Equal(n.s.tokens, n.sTokens) || !slices.Equal(n.s.hashes, n.sHashes) || !slices.Equal(n.s.ends, n.sEnds) {
					t.Fatalf("seed %d round %d: turn %d's tokens or hashes changed after it was returned", seed, round, k)
				}
				if len(n.s.tokens) > n.s.tokensExt.Used() || len(n.s.hashes) > n.s.hashesExt.Used() {
					t.Fatalf("seed %d round %d: turn %d holds more than its extent claims", seed, round, k)
				}
			}
		}
	}
	t.Logf("%d turns: %d appended their tokens in place (%d their hashes), %d copied", turns.Load(), inPlace.Load(), inPlaceHashes.Load(), copies.Load())
	if inPlace.Load() == 0 || copies.Load() == 0 {
		t.Fatal("the test did not exercise both paths")
	}
}
