package engineevents

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/llm-d/llm-d-kv-cache/pkg/kvevents"
	"github.com/llm-d/llm-d-kv-cache/pkg/kvevents/engineadapter"
	"github.com/vmihailenco/msgpack/v5"

	"switchyard.dev/pkg/engineevents"
	"switchyard.dev/pkg/kv"
)

// payload builds one EventBatch as vLLM publishes it: half BlockStored
// events (blocks of 16 tokens each, chained to a parent, medium GPU), half
// BlockRemoved events, uint64 hashes above MaxInt64 (the default integer
// form), compact integers as msgspec writes them.
func payload(tb testing.TB, events, blocks int, mapForm bool) []byte {
	return payloadParent(tb, events, blocks, mapForm, true)
}

// payloadParent builds the batch; without parents every store is a root, so
// a mapper can rehash it.
func payloadParent(tb testing.TB, events, blocks int, mapForm, withParent bool) []byte {
	tb.Helper()
	var evs []any
	h := uint64(1 << 63)
	var hashes []any
	for i := range events {
		if i%2 == 0 {
			hashes = make([]any, blocks)
			for j := range hashes {
				h++
				hashes[j] = h
			}
		}
		if i%2 == 1 { // remove what the previous event stored
			if mapForm {
				evs = append(evs, map[string]any{"type": "BlockRemoved", "block_hashes": hashes, "medium": "GPU"})
			} else {
				evs = append(evs, []any{"BlockRemoved", hashes, "GPU"})
			}
			continue
		}
		tokens := make([]any, 16*blocks)
		for j := range tokens {
			tokens[j] = 1000 + (i*131+j*7)%150000 // realistic vocabulary ids, 1–3 byte encodings
		}
		var parent any
		if withParent {
			parent = h - uint64(blocks) - 7
		}
		if mapForm {
			evs = append(evs, map[string]any{"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
				"token_ids": tokens, "block_size": 16, "medium": "GPU"})
		} else {
			evs = append(evs, []any{"BlockStored", hashes, parent, tokens, 16, nil, "GPU"})
		}
	}
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	enc.SetSortMapKeys(true)
	if err := enc.Encode([]any{1767225600.5, evs, 0}); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

type shape struct {
	name           string
	events, blocks int
	mapForm        bool
}

var shapes = []shape{
	{"positional/events=16/blocks=4", 16, 4, false},
	{"positional/events=256/blocks=4", 256, 4, false},
	{"positional/events=16/blocks=32", 16, 32, false},
	{"map/events=16/blocks=4", 16, 4, true},
	{"map/events=256/blocks=4", 256, 4, true},
}

// TestSameEvents checks both decoders read the same events from the
// payloads, so the benchmark compares like with like.
func TestSameEvents(t *testing.T) {
	ad := engineadapter.NewVLLMAdapter()
	for _, s := range shapes {
		p := payload(t, s.events, s.blocks, s.mapForm)
		_, _, theirs, err := ad.ParseMessage(&kvevents.RawMessage{Topic: "kv@pod-1@m", Sequence: 1, Payload: p})
		if err != nil {
			t.Fatal(err)
		}
		var ours engineevents.Batch
		if err := engineevents.DecodeBatch(p, &ours); err != nil {
			t.Fatal(err)
		}
		if len(theirs.Events) != len(ours.Events) || len(ours.Events) != s.events {
			t.Fatalf("%s: llm-d %d events, ours %d, want %d", s.name, len(theirs.Events), len(ours.Events), s.events)
		}
		for i, ev := range theirs.Events {
			switch e := ev.(type) {
			case *kvevents.BlockStoredEvent:
				o := ours.Events[i]
				if o.Type != engineevents.BlockStored || len(o.Hashes) != len(e.BlockHashes) || len(o.Tokens) != len(e.Tokens) ||
					o.Hashes[0] != e.BlockHashes[0] || o.Tokens[len(o.Tokens)-1] != e.Tokens[len(e.Tokens)-1] {
					t.Fatalf("%s event %d differs: %+v vs %+v", s.name, i, o, e)
				}
			case *kvevents.BlockRemovedEvent:
				o := ours.Events[i]
				if o.Type != engineevents.BlockRemoved || o.Hashes[len(o.Hashes)-1] != e.BlockHashes[len(e.BlockHashes)-1] {
					t.Fatalf("%s event %d differs", s.name, i)
				}
			default:
				t.Fatalf("%s event %d: %T", s.name, i, ev)
			}
		}
	}
}

// BenchmarkDecode decodes the same payloads with both: events/s per core
// (run with -cpu 1).
func BenchmarkDecode(b *testing.B) {
	for _, s := range shapes {
		p := payload(b, s.events, s.blocks, s.mapForm)
		b.Run("switchyard/"+s.name, func(b *testing.B) {
			var batch engineevents.Batch
			b.SetBytes(int64(len(p)))
			b.ReportAllocs()
			for b.Loop() {
				if err := engineevents.DecodeBatch(p, &batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(s.events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
		b.Run("llm-d/"+s.name, func(b *testing.B) {
			ad := engineadapter.NewVLLMAdapter()
			msg := &kvevents.RawMessage{Topic: "kv@pod-1@m", Sequence: 1, Payload: p}
			b.SetBytes(int64(len(p)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, _, err := ad.ParseMessage(msg); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(s.events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkDecodeAndMap is Switchyard's whole per-batch work in the shim:
// decode, rehash the tokens with pkg/kvhash and resolve the engine-hash map
// (llm-d does the equivalent later, in its indexer pool; not compared).
func BenchmarkDecodeAndMap(b *testing.B) {
	for _, s := range shapes[:2] {
		p := payloadParent(b, s.events, s.blocks, s.mapForm, false)
		b.Run(fmt.Sprintf("switchyard/%s", s.name), func(b *testing.B) {
			var batch engineevents.Batch
			m := engineevents.NewMapper(engineevents.MapperConfig{BlockSize: 16})
			var out []kv.Event
			b.ReportAllocs()
			for b.Loop() {
				if err := engineevents.DecodeBatch(p, &batch); err != nil {
					b.Fatal(err)
				}
				out = m.Apply(&batch, out[:0])
			}
			b.ReportMetric(float64(s.events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
