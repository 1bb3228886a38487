package faultsuite

import (
	"fmt"
	"strings"
	"time"
)

// Result is one fault's row of figures.
type Result struct {
	Fault    string
	Requests int // turns in flight at some point of the window
	Lost     int // failed before their first byte
	Broken   int // failed after it
	Refused  int // attempts the frontend refused unread (sent again by the client)
	// Recovery is from the injection (or the restart) to the event the
	// fault's note names; negative: never seen.
	Recovery time.Duration
	Notes    []string
	// Failures are the assertions this fault failed, for the summary.
	Failures []string
}

// Count fills Requests, Lost, Broken and Refused from the turns.
func (r *Result) Count(turns []Turn) {
	for i := range turns {
		t := &turns[i]
		r.Requests++
		r.Refused += t.Refused
		switch {
		case t.Lost():
			r.Lost++
		case t.Broken():
			r.Broken++
		}
	}
}

// Note adds a note.
func (r *Result) Note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// Never records that the fault's recovery was never seen (Recovery -1),
// with a note why.
func (r *Result) Never(format string, args ...any) {
	r.Recovery = -1
	r.Note(format, args...)
}

// Fail records a failed assertion (the test reports it too).
func (r *Result) Fail(format string, args ...any) {
	r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
}

// Markdown renders the results as the table in docs/reliability.md.
func Markdown(rs []Result) string {
	var b strings.Builder
	b.WriteString("| fault | requests in window | lost | broken mid-stream | recovery | notes |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | --- |\n")
	for _, r := range rs {
		notes := strings.Join(r.Notes, "; ")
		if r.Refused > 0 {
			notes = strings.TrimPrefix(notes+fmt.Sprintf("; %d attempts refused by the frontend while it was down, sent again by the client", r.Refused), "; ")
		}
		if len(r.Failures) > 0 {
			notes = strings.TrimPrefix(notes+"; **FAILED: "+strings.Join(r.Failures, "; ")+"**", "; ")
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %s | %s |\n", escape(r.Fault), r.Requests, r.Lost, r.Broken, seconds(r.Recovery), escape(notes))
	}
	return b.String()
}

// seconds prints a duration as "1.23 s", or "never" when negative.
func seconds(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func escape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
