package enginesim

import (
	"testing"
	"time"
)

func TestMockerModel(t *testing.T) {
	p := DefaultMockerModel()
	prefill := func(n int) *Batch { return &Batch{Prefill: []PrefillChunk{{NewTokens: n}}} }
	for _, tc := range []struct {
		name string
		b    *Batch
		want float64 // ms
	}{
		{"idle", &Batch{}, 0},
		{"prefill 1 token", prefill(1), 16.516604},
		{"prefill 1000 tokens", prefill(1000), 32.1058589},
		{"prefill 8192 tokens", prefill(8192), 169.1366},
		{"prefill 8192 tokens after 400k: the same (not physical)", &Batch{Prefill: []PrefillChunk{{NewTokens: 8192, PrefixTokens: 400_000}}}, 169.1366},
		{"decode u=0", &Batch{DecodeRequests: 1}, 5.74},
		{"decode u=0.5", &Batch{DecodeRequests: 8, KVUsage: 0.5}, 26.31},
		{"decode u=1", &Batch{DecodeRequests: 8, KVUsage: 1}, 34.01},
		{"mixed: the sum", &Batch{Prefill: []PrefillChunk{{NewTokens: 1000}}, DecodeRequests: 8, KVUsage: 1}, 32.1058589 + 34.01},
	} {
		if got := float64(p.StepTime(tc.b)) / 1e6; got < tc.want-0.001 || got > tc.want+0.001 {
			t.Errorf("%s: %.4f ms, want %.4f ms", tc.name, got, tc.want)
		}
	}
	// The floor applies when the polynomial goes below 1 ms.
	low := MockerModel{DecodeC: 0.2, DecodeFloorMs: 1}
	if got := low.StepTime(&Batch{DecodeRequests: 1}); got != time.Millisecond {
		t.Errorf("decode floor: %v", got)
	}
}

const testTable = `{
 "prefill": {"x": [100, 1000], "y": [0, 10000], "ms": [[12, 52], [30, 430]]},
 "decode":  {"x": [1, 9], "y": [1000, 5000], "ms": [[6, 10], [14, 50]]}}`

func TestTableModel(t *testing.T) {
	m, err := ParseTableModel([]byte(testTable))
	if err != nil {
		t.Fatal(err)
	}
	chunk := func(n, p int) PrefillChunk { return PrefillChunk{NewTokens: n, PrefixTokens: p} }
	for _, tc := range []struct {
		name string
		b    Batch
		want time.Duration
	}{
		{"grid point", Batch{Prefill: []PrefillChunk{chunk(100, 0)}}, 12 * time.Millisecond},
		{"along new tokens", Batch{Prefill: []PrefillChunk{chunk(550, 0)}}, 21 * time.Millisecond},
		{"along prefix", Batch{Prefill: []PrefillChunk{chunk(1000, 5000)}}, 230 * time.Millisecond},
		{"bilinear", Batch{Prefill: []PrefillChunk{chunk(550, 5000)}}, 131 * time.Millisecond},
		{"extends the last segment", Batch{Prefill: []PrefillChunk{chunk(1900, 0)}}, 48 * time.Millisecond},
		{"extends below the first", Batch{Prefill: []PrefillChunk{chunk(10, 0)}}, 10200 * time.Microsecond},
		// Two chunks of 500 after 0 do the attention work of one chunk of
		// 1000 after −250: clamped to 0.
		{"two small chunks", Batch{Prefill: []PrefillChunk{chunk(500, 0), chunk(500, 0)}}, 30 * time.Millisecond},
		// 500 after 9750 and 500 after 250: Σ = 500·10000 + 2·125000 = 5.25e6
		// = 1000·p + 500000 → p = 4750.
		{"equivalent prefix", Batch{Prefill: []PrefillChunk{chunk(500, 9750), chunk(500, 250)}}, 220 * time.Millisecond},
		{"decode per-sequence context", Batch{DecodeRequests: 5, DecodeContextTokens: 5 * 3000}, 20 * time.Millisecond},
		{"mixed: the sum", Batch{Prefill: []PrefillChunk{chunk(100, 0)}, DecodeRequests: 1, DecodeContextTokens: 1000}, 18 * time.Millisecond},
		{"idle", Batch{}, 0},
	} {
		if got := m.StepTime(&tc.b).Round(time.Microsecond); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	for _, bad := range []string{
		`{}`,
		`nope`,
		`{"prefill": {"x": [1], "y": [0], "ms": [[1]]}, "decode": {"x": [], "y": [0], "ms": []}}`,
		`{"prefill": {"x": [1, 1], "y": [0], "ms": [[1], [2]]}, "decode": {"x": [1], "y": [0], "ms": [[1]]}}`,
		`{"prefill": {"x": [1], "y": [0], "ms": [[-1]]}, "decode": {"x": [1], "y": [0], "ms": [[1]]}}`,
		`{"prefill": {"x": [1], "y": [0, 5], "ms": [[1]]}, "decode": {"x": [1], "y": [0], "ms": [[1]]}}`,
		`{"prefill": {"x": [1, 2], "y": [0], "ms": [[1]]}, "decode": {"x": [1], "y": [0], "ms": [[1]]}}`,
	} {
		if _, err := ParseTableModel([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

func FuzzParseTableModel(f *testing.F) {
	f.Add([]byte(testTable))
	f.Add([]byte(`{"prefill": {"x": [1], "y": [0], "ms": [[1]]}, "decode": {"x": [1], "y": [0], "ms": [[3]]}}`))
	f.Add([]byte(`{"prefill": {}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseTableModel(b)
		if err != nil {
			return
		}
		// Any accepted table yields non-negative times.
		for _, n := range []int{0, 1, 100, 10_000, 1 << 20} {
			for _, p := range []int{0, 1000, 1 << 20} {
				if d := m.StepTime(&Batch{Prefill: []PrefillChunk{{NewTokens: n, PrefixTokens: p}}}); d < 0 {
					t.Fatalf("prefill(%d, %d) = %v", n, p, d)
				}
			}
		}
		for _, bs := range []int{1, 7, 300} {
			if d := m.StepTime(&Batch{DecodeRequests: bs, DecodeContextTokens: bs * 4096}); d < 0 {
				t.Fatalf("decode(%d) = %v", bs, d)
			}
		}
	})
}

func TestHugeTableValuesSaturate(t *testing.T) {
	m, err := ParseTableModel([]byte(`{"prefill": {"x": [0, 1], "y": [0], "ms": [[0], [1e300]]}, "decode": {"x": [1], "y": [0], "ms": [[1e300]]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if d := m.StepTime(&Batch{Prefill: []PrefillChunk{{NewTokens: 1 << 20}}}); d <= 0 {
		t.Fatalf("prefill time %v overflowed", d)
	}
	if d := m.StepTime(&Batch{DecodeRequests: 1}); d <= 0 {
		t.Fatalf("decode time %v overflowed", d)
	}
}
