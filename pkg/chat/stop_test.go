package chat

import (
	"encoding/json"
	"testing"
)

func TestStopMatcherEverySplit(t *testing.T) {
	text := "one two STOP three END four"
	for _, tc := range []struct {
		stops   []string
		want    string
		matched string
	}{
		{stops: []string{"END", "STOP"}, want: "one two ", matched: "STOP"},
		{stops: []string{"END"}, want: "one two STOP three ", matched: "END"},
		{stops: []string{"nope", ""}, want: text},
		{stops: []string{"four!"}, want: text},
	} {
		for i := 0; i <= len(text); i++ {
			for j := i; j <= len(text); j++ {
				m := NewStopMatcher(tc.stops)
				got := m.Feed(text[:i]) + m.Feed(text[i:j]) + m.Feed(text[j:]) + m.Flush()
				if got != tc.want || m.Matched() != tc.matched || m.Done() != (tc.matched != "") {
					t.Fatalf("%v split %d/%d: %q matched %q", tc.stops, i, j, got, m.Matched())
				}
			}
		}
	}
	if NewStopMatcher(nil) != nil || NewStopMatcher(nil).Feed("x") != "x" {
		t.Fatal("no stops must pass text through")
	}
}

func TestChatStops(t *testing.T) {
	for raw, want := range map[string]int{``: 0, `null`: 0, `"a"`: 1, `["a","b"]`: 2} {
		r := ChatCompletionRequest{Stop: json.RawMessage(raw)}
		if s, err := r.Stops(); err != nil || len(s) != want {
			t.Errorf("%s: %v %v", raw, s, err)
		}
	}
	for _, raw := range []string{`1`, `["a","b","c","d","e"]`} {
		r := ChatCompletionRequest{Stop: json.RawMessage(raw)}
		if _, err := r.Stops(); err == nil {
			t.Errorf("%s accepted", raw)
		}
	}
}
