package chat

import (
	"encoding/json"
	"slices"
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

// TestMessagesStopSequences: Anthropic's stop_sequences is bounded like
// OpenAI's stop, so no body can make the answer's StopMatcher look for
// thousands of sequences at every token.
func TestMessagesStopSequences(t *testing.T) {
	body := func(n int) []byte {
		stops, _ := json.Marshal(slices.Repeat([]string{"x"}, n))
		return []byte(`{"max_tokens":5,"stop_sequences":` + string(stops) + `,"messages":[{"role":"user","content":"hi"}]}`)
	}
	if r, _, err := DecodeMessages(body(maxStopSequences), true, nil); err != nil || len(r.StopSequences) != maxStopSequences {
		t.Fatalf("%d stop sequences: %v", maxStopSequences, err)
	}
	_, _, err := DecodeMessages(body(maxStopSequences+1), true, nil)
	if re, ok := err.(*RequestError); !ok || re.Param != "stop_sequences" {
		t.Fatalf("%d stop sequences: error %v, want one naming stop_sequences", maxStopSequences+1, err)
	}
}

// TestMessagesBlankStopSequence: a stop sequence of whitespace only (or
// none) is refused, as Anthropic refuses it.
func TestMessagesBlankStopSequence(t *testing.T) {
	for _, stop := range []string{``, ` `, `\n`, `\t \n`} {
		body := []byte(`{"max_tokens":5,"stop_sequences":["END","` + stop + `"],"messages":[{"role":"user","content":"hi"}]}`)
		_, _, err := DecodeMessages(body, true, nil)
		if re, ok := err.(*RequestError); !ok || re.Param != "stop_sequences" {
			t.Errorf("stop sequence %q: error %v, want one naming stop_sequences", stop, err)
		}
	}
	body := []byte(`{"max_tokens":5,"stop_sequences":["\nEND "],"messages":[{"role":"user","content":"hi"}]}`)
	if _, _, err := DecodeMessages(body, true, nil); err != nil {
		t.Errorf("a stop sequence with text around whitespace: %v", err)
	}
}
