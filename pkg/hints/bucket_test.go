package hints

import (
	"testing"
	"time"

	"switchyard.dev/pkg/sessionindex"
)

func TestBucket(t *testing.T) {
	b := NewBucket(2, 4)
	steps := []struct {
		at   time.Duration
		take float64
		ok   bool
	}{
		{0, 3, true},
		{0, 2, false}, // 1 left
		{500 * time.Millisecond, 2, true},
		{10 * time.Second, 5, false}, // capped at the burst
		{10 * time.Second, 4, true},
	}
	for i, s := range steps {
		if got := b.Take(t0.Add(s.at), s.take); got != s.ok {
			t.Fatalf("step %d: take %v at %v = %v", i, s.take, s.at, got)
		}
	}
	if !NewBucket(0, 0).Take(t0, 1e9) {
		t.Fatal("zero rate must be unlimited")
	}
}

func TestToolMedianIsLearned(t *testing.T) {
	idx := sessionindex.New(sessionindex.Config{})
	_ = idx.UpdateFromStored("s", "w0", 0, hs(1), t0)
	e := New(Config{MinToolSamples: 3, DefaultToolTime: time.Hour})
	now := t0
	// Three tool calls of 1s, 2s and 9s: median 2s.
	for _, d := range []time.Duration{time.Second, 2 * time.Second, 9 * time.Second} {
		e.Observe(now, acting("s", "w0", now.Sub(t0)))
		now = now.Add(d)
		e.Observe(now, reasoning("s", "w0"))
		now = now.Add(time.Second)
	}
	if st := e.Stats(); st.ToolSamples != 3 || st.MedianTool != 2*time.Second {
		t.Fatalf("stats %+v", st)
	}
	e.Observe(now, acting("s", "w0", now.Sub(t0)))
	v := &view{idx: idx}
	if got := e.Decide(now.Add(2*time.Second), v); len(got) != 0 {
		t.Fatalf("demoted at the median: %v", got)
	}
	if got := e.Decide(now.Add(2*time.Second+time.Millisecond), v); len(got) != 1 || got[0].Kind != KindDemote {
		t.Fatalf("not demoted past the median: %v", got)
	}
	for _, p := range e.Policies() {
		want := uint64(0)
		if p.Name == PolicyDemoteLongTool {
			want = 1
		}
		if p.Sent != want || !p.Enabled || p.Description == "" {
			t.Fatalf("policy %+v", p)
		}
	}
}

func TestParsePolicies(t *testing.T) {
	if err := ParsePolicies(PolicyNames()); err != nil {
		t.Fatal(err)
	}
	if err := ParsePolicies([]string{"evict_everything"}); err == nil {
		t.Fatal("unknown policy accepted")
	}
}
