package chat

import (
	"encoding/json"
	"strings"
)

// StopMatcher ends generated text at the first stop sequence, as it streams.
// It holds back any tail that may still grow into a stop sequence, so text
// that the stop sequence cuts off is never shown.
type StopMatcher struct {
	stops   []string
	held    string
	matched string
	done    bool
}

// NewStopMatcher returns a matcher for the non-empty stops, or nil if there
// are none (a nil matcher passes text through).
func NewStopMatcher(stops []string) *StopMatcher {
	var s []string
	for _, st := range stops {
		if st != "" {
			s = append(s, st)
		}
	}
	if len(s) == 0 {
		return nil
	}
	return &StopMatcher{stops: s}
}

// Feed adds text and returns what can be shown. Once a stop sequence is
// found it returns the text before it and Done reports true; later text is
// dropped.
func (m *StopMatcher) Feed(text string) string {
	if m == nil {
		return text
	}
	if m.done {
		return ""
	}
	s := m.held + text
	cut, which := -1, ""
	for _, st := range m.stops {
		if i := strings.Index(s, st); i >= 0 && (cut < 0 || i < cut) {
			cut, which = i, st
		}
	}
	if cut >= 0 {
		m.done, m.matched, m.held = true, which, ""
		return s[:cut]
	}
	keep := 0
	for _, st := range m.stops {
		keep = max(keep, partialSuffix(s, st))
	}
	m.held = s[len(s)-keep:]
	return s[:len(s)-keep]
}

// Flush returns the held-back tail at the end of the stream.
func (m *StopMatcher) Flush() string {
	if m == nil || m.done {
		return ""
	}
	s := m.held
	m.held = ""
	return s
}

// Done reports whether a stop sequence ended the text.
func (m *StopMatcher) Done() bool { return m != nil && m.done }

// Matched is the stop sequence that ended the text ("" if none).
func (m *StopMatcher) Matched() string {
	if m == nil {
		return ""
	}
	return m.matched
}

// Stops decodes OpenAI's stop: a string, an array of strings, or null.
func (r *ChatCompletionRequest) Stops() ([]string, error) {
	raw := strings.TrimSpace(string(r.Stop))
	if raw == "" || raw == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(r.Stop, &one) == nil {
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(r.Stop, &many); err != nil {
		return nil, badRequest("stop", "stop must be a string or an array of strings")
	}
	if len(many) > 4 {
		return nil, badRequest("stop", "at most 4 stop sequences")
	}
	return many, nil
}
