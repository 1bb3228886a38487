package engineevents

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func diffEvents(want, got []Event) string {
	return cmp.Diff(want, got, cmpopts.EquateEmpty())
}

// Every prefix of every fixture must decode without panicking, and a cut
// payload must be reported as damaged (never silently accepted as whole).
func TestDecodeEveryTruncation(t *testing.T) {
	var b Batch
	for _, f := range fixtures(t) {
		if f.errs {
			continue
		}
		for cut := range len(f.payload) {
			err := DecodeBatch(f.payload[:cut], &b)
			if err == nil {
				t.Fatalf("%s cut at %d/%d decoded without error", f.name, cut, len(f.payload))
			}
			if !errors.Is(err, ErrBatch) {
				t.Fatalf("%s cut at %d: error %v is not ErrBatch", f.name, cut, err)
			}
		}
	}
}

func TestDecodeReusesBatch(t *testing.T) {
	fs := fixtures(t)
	var b Batch
	if err := DecodeBatch(fs[0].payload, &b); err != nil {
		t.Fatal(err)
	}
	if err := DecodeBatch(fs[1].payload, &b); err != nil {
		t.Fatal(err)
	}
	if diff := diffEvents(fs[1].want, b.Events); diff != "" {
		t.Errorf("second decode (-want +got):\n%s", diff)
	}
}

func TestTierOf(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		ok   bool
	}{
		{"", "device", true}, {"GPU", "device", true}, {"gpu", "device", true}, {"Device", "device", true},
		{"CPU", "host", true}, {"cpu_pinned", "host", true}, {"CPU_TIER1", "host", true},
		{"CPU_TIER2", "disk", true}, {"DISK", "disk", true}, {"nvme", "disk", true}, {"STORAGE", "disk", true},
		{"EXTERNAL", "shared", true}, {"network", "shared", true}, {"REMOTE", "shared", true}, {"SHARED", "shared", true},
		{"TAPE", "", false}, {"a-very-long-medium-name", "", false},
	} {
		got, ok := TierOf([]byte(tc.in))
		if ok != tc.ok || (ok && got.String() != tc.want) {
			t.Errorf("TierOf(%q) = %v, %v; want %s, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func FuzzDecodeBatch(f *testing.F) {
	for _, fx := range fixtures(f) {
		f.Add(fx.payload)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		var b Batch
		err := DecodeBatch(payload, &b)
		if err != nil && !errors.Is(err, ErrBatch) {
			t.Fatalf("error %v is not ErrBatch", err)
		}
		for _, ev := range b.Events {
			switch ev.Type {
			case BlockStored:
				if len(ev.Hashes) == 0 || (len(ev.Tokens) > 0 && len(ev.Tokens) != ev.BlockSize*len(ev.Hashes)) {
					t.Fatalf("inconsistent stored event %+v", ev)
				}
			case BlockRemoved:
				if len(ev.Hashes) == 0 {
					t.Fatal("removal without hashes")
				}
			case AllBlocksCleared:
			default:
				t.Fatalf("event of type %v", ev.Type)
			}
			if !ev.Tier.Valid() {
				t.Fatalf("invalid tier %v", ev.Tier)
			}
		}
		// Decoding again into a used Batch gives the same events (no
		// aliasing between decodes).
		first := slices.Clone(b.Events)
		for i := range first {
			first[i].Hashes, first[i].Tokens = slices.Clone(first[i].Hashes), slices.Clone(first[i].Tokens)
		}
		_ = DecodeBatch(payload, &b)
		if diff := diffEvents(first, b.Events); diff != "" {
			t.Fatalf("second decode differs:\n%s", diff)
		}
		// Whatever decodes must map without panicking.
		m := NewMapper(MapperConfig{BlockSize: 4})
		m.Apply(&b, nil)
		m.Apply(&b, nil)
	})
}
