package faultsuite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

const exposition = `# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 42
go_goroutines_extra 7
x{worker="worker-1"} 3
x{worker="worker-10"} 5
m_total{reason="dial"} 2
m_total{reason="stalled"} 1.5
m_total_other 9
`

func TestParseMetric(t *testing.T) {
	for _, tc := range []struct {
		series string
		want   float64
		ok     bool
	}{
		{"go_goroutines", 42, true},
		{`x{worker="worker-1"}`, 3, true},
		{`x{worker="worker-10"}`, 5, true},
		{`x{worker="worker-2"}`, 0, false},
		{"absent", 0, false},
	} {
		if got, ok := parseMetric([]byte(exposition), tc.series); got != tc.want || ok != tc.ok {
			t.Errorf("parseMetric(%s) = %v, %v; want %v, %v", tc.series, got, ok, tc.want, tc.ok)
		}
	}
	if got := sumMetric([]byte(exposition), "m_total"); got != 3.5 {
		t.Errorf("sumMetric = %v, want 3.5", got)
	}
}

func TestTurnOutcomesAndTable(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	turns := []Turn{
		{Start: at(0), Head: at(10), End: at(50), Status: 200, Done: true},           // ok
		{Start: at(0), End: at(20), Status: 503, Err: "HTTP 503"},                    // lost
		{Start: at(0), Head: at(10), End: at(30), Status: 200, Err: "in-band error"}, // broken
		{Start: at(0), End: at(40), Err: "connection reset"},                         // lost
		{Start: at(0), Head: at(10), End: at(90), Status: 200, Done: true, Refused: 3},
	}
	r := Result{Fault: "a | b", Recovery: 1500 * time.Millisecond}
	r.Count(turns)
	if r.Requests != 5 || r.Lost != 2 || r.Broken != 1 || r.Refused != 3 {
		t.Fatalf("counted %+v", r)
	}
	r.Note("a note")
	r.Fail("too slow")
	never := Result{Fault: "never", Recovery: -1}
	md := Markdown([]Result{r, never})
	for _, want := range []string{
		"| fault | requests in window | lost | broken mid-stream | recovery | notes |",
		`| a \| b | 5 | 2 | 1 | 1.50 s | a note; 3 attempts refused`,
		"**FAILED: too slow**",
		"| never | 0 | 0 | 0 | never |  |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
	in := Overlapping(at(45), at(60))
	if !in(&turns[0]) || in(&turns[1]) {
		t.Error("Overlapping: wrong turns")
	}
}

// refused decides which failures the client sends again: those where the
// frontend died before it could have answered, wrapped as net/http wraps
// them, and nothing an answering frontend says.
func TestRefused(t *testing.T) {
	sys := func(op string, errno syscall.Errno) error {
		return &url.Error{Op: "Post", URL: "http://127.0.0.1:1/v1/chat/completions",
			Err: &net.OpError{Op: op, Net: "tcp", Err: os.NewSyscallError(op, errno)}}
	}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"dial refused", sys("dial", syscall.ECONNREFUSED), true},
		{"reset before the response", sys("read", syscall.ECONNRESET), true},
		{"killed while the request was written", fmt.Errorf("readfrom tcp: %w", sys("write", syscall.EPIPE)), true},
		{"closed before the response", &url.Error{Op: "Post", Err: io.EOF}, true},
		{"idle connection closed", errors.New("http: server closed idle connection"), true},
		{"an answer", errors.New("HTTP 503: overloaded"), false},
		{"the client's deadline", &url.Error{Op: "Post", Err: context.DeadlineExceeded}, false},
		{"timed out", sys("read", syscall.ETIMEDOUT), false},
	} {
		if got := refused(c.err); got != c.want {
			t.Errorf("%s: refused(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
