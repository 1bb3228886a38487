package engineshim

import (
	"slices"
	"testing"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	"switchyard.dev/pkg/kvhash"
)

// BenchmarkPromptOnBase is a shim's share of a 100k-token agent turn sent
// on its base (the session's previous prompt): making the prompt whole and
// keeping it for the next turn, which adds 40 tokens. b.N turns of one
// session; the request's own tokens arrive decoded, as from the wire.
func BenchmarkPromptOnBase(b *testing.B) {
	const block, size, add = 16, 100_000, 40
	h := kvhash.New(block, "", "")
	p := newPrompts(block, 4*size)
	prompt := seq(0, size)
	hashes := uint64sOf(h.Blocks(prompt))
	key := keepWhole(p, &enginev1.GenerateRequest{TokenIds: prompt, BlockHashes: hashes})
	// The turns to come, made before the clock starts.
	prompt = slices.Grow(prompt, b.N*add)
	for i := range b.N * add {
		prompt = append(prompt, uint32(size+i))
	}
	hashes = uint64sOf(h.Blocks(prompt))
	b.ResetTimer()
	for i := range b.N {
		n := (size + i*add) / block // the base's full blocks
		end := size + (i+1)*add
		req := &enginev1.GenerateRequest{Base: &enginev1.PromptBase{Key: key, Blocks: uint32(n)},
			TokenIds: slices.Clone(prompt[n*block : end]), BlockHashes: slices.Clone(hashes[n : end/block])}
		k, err := onBase(p, req)
		if err != nil {
			b.Fatal(err)
		}
		key = k
	}
}
