package trace

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
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

// BenchmarkPerfettoOverlapping exports one session whose n requests all
// overlap (an agent fanning out, or a harness retrying): every request
// opens a lane, the case where finding a free lane costs the most.
//
//	go test -run XXX -bench PerfettoOverlapping ./pkg/trace
func BenchmarkPerfettoOverlapping(b *testing.B) {
	for _, n := range []int{1000, 10000, 30000} {
		recs := make([]Record, n)
		for i := range recs {
			recs[i] = Record{Schema: Schema, EventType: EventRequestEnd, EventTimeUnixMs: uint64(2*n + i),
				AgentContext: &AgentContext{SessionID: "s"},
				Request:      &RequestMetrics{RequestID: fmt.Sprint(i), RequestReceivedMs: U64(uint64(i)), TotalTimeMs: F64(float64(2 * n))}}
		}
		b.Run(fmt.Sprintf("requests=%d", n), func(b *testing.B) {
			for b.Loop() {
				if err := WritePerfetto(io.Discard, recs, PerfettoOptions{NoStages: true}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReadGzip reads a recorder's gzip file (members of a flush each,
// a megabyte of records at most): decompressed alone, the member reader's
// own cost, and into records.
//
//	go test -run XXX -bench ReadGzip ./pkg/trace
func BenchmarkReadGzip(b *testing.B) {
	var file, member bytes.Buffer
	zw := gzip.NewWriter(&file)
	rng := rand.New(rand.NewPCG(1, 1))
	size := 0
	for range 8 {
		member.Reset()
		for member.Len() < 1<<20 {
			hs := make([]uint64, 1+rng.IntN(64))
			for i := range hs {
				hs[i] = rng.Uint64() >> rng.IntN(64)
			}
			fmt.Fprintf(&member, `{"timestamp": %d, "event": {"schema": "dynamo.request.trace.v1", "event_type": "request_end", `+
				`"event_time_unix_ms": %d, "agent_context": {"session_id": "s%x"}, "request": {"request_id": "r%x", `+
				`"replay": {"trace_block_size": 16, "input_length": %d, "input_sequence_hashes": %s}}}}`+"\n",
				rng.Uint64N(1e12), rng.Uint64N(1e12), rng.Uint32(), rng.Uint64(), 16*len(hs), strings.ReplaceAll(fmt.Sprint(hs), " ", ","))
		}
		size += member.Len()
		zw.Reset(&file)
		zw.Write(member.Bytes())
		zw.Close()
	}
	b.Logf("%d bytes of records in %d of gzip", size, file.Len())
	b.Run("decompress", func(b *testing.B) {
		b.SetBytes(int64(size))
		for b.Loop() {
			r, err := Decompress(bytes.NewReader(file.Bytes()))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("records", func(b *testing.B) {
		b.SetBytes(int64(size))
		for b.Loop() {
			r, err := Decompress(bytes.NewReader(file.Bytes()))
			if err != nil {
				b.Fatal(err)
			}
			if _, _, err := ReadRecords(r, "bench"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
