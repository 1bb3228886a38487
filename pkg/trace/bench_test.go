package trace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
)

// BenchmarkReadWeka decodes a synthetic Weka session of growing turns (the
// corpus median is ~45 turns of ~100k tokens: 1,600 ids per turn).
//
//	go test -run XXX -bench ReadWeka ./pkg/trace
func BenchmarkReadWeka(b *testing.B) {
	for _, turns := range []int{10, 45} {
		var reqs []map[string]any
		var ids []int
		for t := range turns {
			for len(ids) < 400+(t+1)*30 {
				ids = append(ids, len(ids)+1)
			}
			reqs = append(reqs, map[string]any{"t": float64(t), "type": "n", "in": len(ids)*64 + 5, "out": 200,
				"hash_ids": ids, "stop": "tool_use", "think_time": 3.0})
		}
		raw, _ := json.Marshal(map[string]any{"id": "bench", "block_size": 64, "requests": reqs})
		b.Run(fmt.Sprintf("turns=%d", turns), func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, err := ReadWeka(bytes.NewReader(raw), 1, "bench"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
