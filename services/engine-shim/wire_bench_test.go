package engineshim

import (
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
)

// The frontend's GenerateRequest of a 100k-token agent turn, encoded and
// decoded: the largest message of a turn (its token ids, and one sequence
// hash per 16-token block), crossing the frontend → shim hop once per turn.
// Run it against another encoding of the fields by building the test binary
// of each and alternating them (docs/benchmarks.md, "The whole path").
func BenchmarkGenerateRequestWire(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	req := &enginev1.GenerateRequest{RequestId: "req-1", TokenIds: make([]uint32, 100_000), BlockHashes: make([]uint64, 100_000/16)}
	for i := range req.TokenIds {
		req.TokenIds[i] = uint32(r.IntN(151_000)) // a Qwen-sized vocabulary
	}
	for i := range req.BlockHashes {
		req.BlockHashes[i] = r.Uint64()
	}
	raw, err := proto.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("marshal", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			if _, err := proto.Marshal(req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unmarshal", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			var out enginev1.GenerateRequest
			if err := proto.Unmarshal(raw, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
