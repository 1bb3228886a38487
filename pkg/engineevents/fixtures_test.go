package engineevents

import (
	"bytes"
	"encoding/binary"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"switchyard.dev/pkg/kv"
)

// The wire fixtures are written from the documented schemas (go-peers.md
// §6.1, §6.5) with an independent msgpack encoder, so the hand-written
// decoder is checked against bytes it did not produce. They are committed
// under testdata; `go test -run TestFixtures -update` rewrites them.

var update = flag.Bool("update", false, "rewrite the committed wire fixtures")

// encode is the reference encoder: msgspec-like (compact integers, map keys
// in a fixed order so the committed bytes are stable).
func encode(t testing.TB, v any, compact bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(compact)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Block hash values in the forms engines publish.
const (
	hBig   uint64 = 0xF00DFACE12345678 // > MaxInt64: msgpack uint64
	hSmall uint64 = 42
	hMid   uint64 = 0x0123456789ABCDEF
)

// digest is a 32-byte SHA-256-sized hash whose last 8 bytes are v (the
// VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0 form).
func digest(v uint64) []byte {
	b := bytes.Repeat([]byte{0xAB}, 32)
	binary.BigEndian.PutUint64(b[24:], v)
	return b
}

func seq(from, n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

func toks(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

type fixture struct {
	name    string
	payload []byte
	want    []Event
	rank    int64
	hasRank bool
	bad     int // Malformed + Unknown
	errs    bool
}

func fixtures(t testing.TB) []fixture {
	ts := 1767225600.125
	return []fixture{
		{
			name: "vllm_positional_int_full",
			// Every BlockStored field through kv_cache_spec_sliding_window.
			payload: encode(t, []any{ts, []any{
				[]any{"BlockStored", []any{hBig, hMid}, nil, seq(100, 8), 4, nil, "GPU", nil, nil, 0, "full_attention", nil},
				[]any{"BlockStored", []any{hSmall}, hMid, seq(108, 4), 4, nil, "GPU", nil, nil, 0, "full_attention", nil},
				[]any{"BlockRemoved", []any{hSmall}, "GPU", 0},
				[]any{"AllBlocksCleared"},
			}, 0}, true),
			want: []Event{
				{Type: BlockStored, Hashes: []uint64{hBig, hMid}, Tokens: toks(100, 8), BlockSize: 4, Tier: kv.TierDevice, SpecKind: "full_attention"},
				{Type: BlockStored, Hashes: []uint64{hSmall}, Parent: hMid, HasParent: true, Tokens: toks(108, 4), BlockSize: 4, Tier: kv.TierDevice, SpecKind: "full_attention"},
				{Type: BlockRemoved, Hashes: []uint64{hSmall}, Tier: kv.TierDevice},
				{Type: AllBlocksCleared},
			},
			hasRank: true,
		},
		{
			name: "vllm_positional_minimal_2elem",
			// Old publisher: trailing defaults omitted, no DP rank.
			payload: encode(t, []any{ts, []any{
				[]any{"BlockStored", []any{hSmall}, nil, seq(1, 4), 4},
				[]any{"BlockRemoved", []any{hSmall}},
			}}, true),
			want: []Event{
				{Type: BlockStored, Hashes: []uint64{hSmall}, Tokens: toks(1, 4), BlockSize: 4},
				{Type: BlockRemoved, Hashes: []uint64{hSmall}},
			},
		},
		{
			name: "vllm_positional_wide_ints",
			// Fixed-width integers everywhere (uint64 0xcf, int64 0xd3).
			payload: encode(t, []any{ts, []any{
				[]any{"BlockStored", []any{hSmall}, nil, seq(1, 4), 4, nil, "CPU"},
			}, 3}, false),
			want: []Event{
				{Type: BlockStored, Hashes: []uint64{hSmall}, Tokens: toks(1, 4), BlockSize: 4, Tier: kv.TierHost},
			},
			rank: 3, hasRank: true,
		},
		{
			name: "vllm_positional_int64_hashes",
			// Hashes that a signed encoder wrote as negative int64.
			payload: encode(t, []any{ts, []any{
				[]any{"BlockStored", []any{int64(-5), int64(7)}, int64(-1), seq(1, 8), 4},
			}, nil}, true),
			want: []Event{
				{Type: BlockStored, Hashes: []uint64{0xFFFFFFFFFFFFFFFB, 7}, Parent: 0xFFFFFFFFFFFFFFFF, HasParent: true, Tokens: toks(1, 8), BlockSize: 4},
			},
		},
		{
			name: "vllm_map_bytes_session",
			// vLLM ≥ #42892: map events, 32-byte digests, session_id, medium in lower case.
			payload: encode(t, []any{ts, []any{
				map[string]any{"type": "BlockStored", "block_hashes": []any{digest(hBig)}, "parent_block_hash": digest(hMid), "token_ids": seq(5, 4), "block_size": 4, "medium": "gpu", "session_id": "sess-1", "lora_name": "adapter-a", "locality": "LOCAL", "origin": "NEW"},
				map[string]any{"type": "BlockStored", "block_hashes": []any{digest(hBig)}, "medium": "cpu"},
				map[string]any{"type": "BlockRemoved", "block_hashes": []any{digest(hBig)}, "medium": "CPU", "ownership": "secondary"},
				map[string]any{"type": "AllBlocksCleared"},
			}, 1}, true),
			want: []Event{
				{Type: BlockStored, Hashes: []uint64{hBig}, Parent: hMid, HasParent: true, Tokens: toks(5, 4), BlockSize: 4, SessionID: "sess-1", LoraName: "adapter-a"},
				{Type: BlockStored, Hashes: []uint64{hBig}, Tokens: []uint32{}, Tier: kv.TierHost},
				{Type: BlockRemoved, Hashes: []uint64{hBig}, Tier: kv.TierHost},
				{Type: AllBlocksCleared},
			},
			rank: 1, hasRank: true,
		},
		{
			name: "vllm_extra_keys",
			// extra_keys: LoRA name then cache salt in block 0; a multimodal
			// [identifier, offset] pair makes the second store opaque; a typed
			// cache_salt key (unmerged RFC) is accepted.
			payload: encode(t, []any{ts, []any{
				[]any{"BlockStored", []any{1, 2}, nil, seq(0, 8), 4, nil, nil, "lora-x", []any{[]any{"lora-x", "tenant-7"}, []any{"lora-x"}}},
				[]any{"BlockStored", []any{3}, 2, seq(8, 4), 4, nil, nil, nil, []any{[]any{[]any{"img-hash", 0}}}},
				map[string]any{"type": "BlockStored", "block_hashes": []any{4}, "token_ids": seq(0, 4), "block_size": 4, "extra_keys": []any{[]any{map[string]any{"type": "cache_salt", "value": "tenant-9"}}}},
			}, 0}, true),
			want: []Event{
				{Type: BlockStored, Hashes: []uint64{1, 2}, Tokens: toks(0, 8), BlockSize: 4, LoraName: "lora-x", CacheSalt: "tenant-7"},
				{Type: BlockStored, Hashes: []uint64{3}, Parent: 2, HasParent: true, Tokens: toks(8, 4), BlockSize: 4, Opaque: true},
				{Type: BlockStored, Hashes: []uint64{4}, Tokens: toks(0, 4), BlockSize: 4, CacheSalt: "tenant-9"},
			},
			hasRank: true,
		},
		{
			name: "sglang_positional_salted",
			// SGLang ≥ 0.5.18: medium CPU_TIER1/2, metadata map at position 7.
			payload: encode(t, []any{ts, []any{
				[]any{"BlockStored", []any{hSmall}, nil, seq(9, 1), 1, nil, "GPU", map[string]any{"cache_salt": "t1"}},
				[]any{"BlockStored", []any{hMid}, nil, seq(9, 1), 1, nil, "CPU_TIER2"},
				[]any{"BlockRemoved", []any{hSmall}, "CPU_TIER1"},
			}, 0}, true),
			want: []Event{
				{Type: BlockStored, Hashes: []uint64{hSmall}, Tokens: toks(9, 1), BlockSize: 1, CacheSalt: "t1"},
				{Type: BlockStored, Hashes: []uint64{hMid}, Tokens: toks(9, 1), BlockSize: 1, Tier: kv.TierDisk},
				{Type: BlockRemoved, Hashes: []uint64{hSmall}, Tier: kv.TierHost},
			},
			hasRank: true,
		},
		{
			name: "sglang_map_salt_session",
			// SGLang after #37482: tagged maps with cache_salt and session_id.
			payload: encode(t, []any{ts, []any{
				map[string]any{"type": "BlockStored", "block_hashes": []any{hSmall, hMid}, "parent_block_hash": nil, "token_ids": seq(0, 32), "block_size": 16, "cache_salt": "t2", "session_id": "s-9", "medium": "GPU"},
				map[string]any{"type": "AllBlocksCleared"},
			}}, true),
			want: []Event{
				{Type: BlockStored, Hashes: []uint64{hSmall, hMid}, Tokens: toks(0, 32), BlockSize: 16, CacheSalt: "t2", SessionID: "s-9"},
				{Type: AllBlocksCleared},
			},
		},
		{
			name: "hma_groups_and_trailing",
			// HMA groups, a sliding-window group, and a 4-element batch
			// (publisher id appended, as a proposal does).
			payload: encode(t, []any{ts, []any{
				[]any{"BlockStored", []any{7}, nil, seq(0, 4), 4, nil, "GPU", nil, nil, 1, "sliding_window", 128, "future-field"},
				[]any{"BlockRemoved", []any{7}, "GPU", 1, "LOCAL"},
			}, 2, digest(1)[:16]}, true),
			want: []Event{
				{Type: BlockStored, Hashes: []uint64{7}, Tokens: toks(0, 4), BlockSize: 4, Group: 1, SpecKind: "sliding_window"},
				{Type: BlockRemoved, Hashes: []uint64{7}, Group: 1},
			},
			rank: 2, hasRank: true,
		},
		{
			name: "malformed_events_skipped",
			// One good event between bad ones: each bad event is counted and
			// skipped; the good ones stand.
			payload: encode(t, []any{ts, []any{
				[]any{"BlockStored", []any{1}, nil, []any{1, "two", 3, 4}, 4},  // bad token
				[]any{"BlockStored", []any{1}, nil, seq(0, 5), 4},              // 5 tokens for 1 block of 4
				[]any{"BlockMoved", []any{1}},                                  // unknown type
				[]any{"BlockStored", []any{1}, nil, seq(0, 4), 4, nil, "TAPE"}, // unknown medium
				17,                                       // not an event
				map[string]any{"block_hashes": []any{1}}, // map without type
				[]any{},                                  // empty
				[]any{"BlockStored", []any{2}, nil, seq(0, 4), 4},          // good
				[]any{"BlockStored", []any{}, nil, nil, 4},                 // no hashes
				[]any{"BlockStored", []any{1}, nil, []any{-1, 0, 0, 0}, 4}, // negative token
				[]any{"BlockRemoved", "not-a-list"},                        // bad hashes
				[]any{"BlockStored", []any{3.5}, nil, seq(0, 4), 4},        // float hash
			}, 0}, true),
			want: []Event{
				{Type: BlockStored, Hashes: []uint64{2}, Tokens: toks(0, 4), BlockSize: 4},
			},
			hasRank: true,
			bad:     11,
		},
		{
			name:    "truncated_mid_event",
			payload: truncate(encode(t, []any{ts, []any{[]any{"BlockStored", []any{1}, nil, seq(0, 4), 4}, []any{"BlockStored", []any{2}, 1, seq(4, 4), 4}}, 0}, true), 9),
			want:    []Event{{Type: BlockStored, Hashes: []uint64{1}, Tokens: toks(0, 4), BlockSize: 4}},
			bad:     1,
			errs:    true,
		},
		{
			name:    "truncated_length_prefix",
			payload: []byte{0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 0xff, 0xff, 0xff, 0xff, 0x91},
			errs:    true,
		},
		{
			name:    "not_a_batch",
			payload: encode(t, map[string]any{"ts": ts}, true),
			errs:    true,
		},
		{
			name:    "one_element_batch",
			payload: encode(t, []any{ts}, true),
			errs:    true,
		},
	}
}

func truncate(b []byte, cut int) []byte { return b[:len(b)-cut] }

// TestFixtures checks the committed fixtures are what the schema helper
// writes, and that each decodes as documented.
func TestFixtures(t *testing.T) {
	for _, f := range fixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			path := filepath.Join("testdata", "wire", f.name+".msgpack")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, f.payload, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			committed, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if !bytes.Equal(committed, f.payload) {
				t.Fatalf("committed fixture differs from the schema helper's output (run with -update)")
			}
			var b Batch
			err = DecodeBatch(committed, &b)
			if (err != nil) != f.errs {
				t.Fatalf("err = %v, want error %v", err, f.errs)
			}
			if got := b.Malformed + b.Unknown; got != f.bad {
				t.Errorf("skipped %d events (malformed %d, unknown %d; first %v), want %d", got, b.Malformed, b.Unknown, b.FirstErr, f.bad)
			}
			if !f.errs && (b.DPRank != f.rank || b.HasDPRank != f.hasRank) {
				t.Errorf("rank %d/%v, want %d/%v", b.DPRank, b.HasDPRank, f.rank, f.hasRank)
			}
			if !f.errs && b.Timestamp != 1767225600.125 {
				t.Errorf("timestamp %v", b.Timestamp)
			}
			if diff := diffEvents(f.want, b.Events); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}
