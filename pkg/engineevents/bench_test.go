package engineevents

import (
	"fmt"
	"testing"

	"switchyard.dev/pkg/kv"
)

// benchPayload is a realistic scheduler step: stores of blocksPer blocks
// of 16 tokens (chained within each request), then as many removals.
func benchPayload(tb testing.TB, events, blocksPer int, mapForm bool) []byte {
	var evs []any
	h := uint64(1 << 63)
	for i := range events {
		hashes := make([]any, blocksPer)
		for j := range hashes {
			h++
			hashes[j] = h
		}
		tokens := seq(i*1000, 16*blocksPer)
		if i%2 == 1 { // half the events remove what the previous one stored
			if mapForm {
				evs = append(evs, map[string]any{"type": "BlockRemoved", "block_hashes": hashes, "medium": "GPU"})
			} else {
				evs = append(evs, []any{"BlockRemoved", hashes, "GPU"})
			}
			continue
		}
		if mapForm {
			evs = append(evs, map[string]any{"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": nil, "token_ids": tokens, "block_size": 16, "medium": "GPU", "lora_name": nil})
		} else {
			evs = append(evs, []any{"BlockStored", hashes, nil, tokens, 16, nil, "GPU", nil, nil})
		}
	}
	return encode(tb, []any{1767225600.0, evs, 0}, true)
}

// BenchmarkDecodeBatch reports decoded events per second on one core.
func BenchmarkDecodeBatch(b *testing.B) {
	for _, form := range []string{"positional", "map"} {
		for _, n := range []int{1, 16, 256} {
			payload := benchPayload(b, n, 4, form == "map")
			b.Run(fmt.Sprintf("%s/events=%d", form, n), func(b *testing.B) {
				var batch Batch
				b.SetBytes(int64(len(payload)))
				b.ReportAllocs()
				for b.Loop() {
					if err := DecodeBatch(payload, &batch); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}

// BenchmarkDecodeAndMap adds Switchyard's rehashing and the engine-hash map
// (what the shim does per batch).
func BenchmarkDecodeAndMap(b *testing.B) {
	for _, n := range []int{16, 256} {
		payload := benchPayload(b, n, 4, false)
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			var batch Batch
			m := NewMapper(MapperConfig{BlockSize: 16})
			var out []kv.Event
			b.ReportAllocs()
			for b.Loop() {
				if err := DecodeBatch(payload, &batch); err != nil {
					b.Fatal(err)
				}
				out = m.Apply(&batch, out[:0])
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
