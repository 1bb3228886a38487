package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"switchyard.dev/pkg/agentctx"
	"switchyard.dev/pkg/trace"
)

func TestLoadgenAgainstStreamingEndpoint(t *testing.T) {
	var mu sync.Mutex
	sessions := map[string]int{}
	parents := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		sessions[r.Header.Get("x-dynamo-session-id")]++
		if r.Header.Get("x-dynamo-parent-session-id") != "" {
			parents++
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		for _, tok := range []string{"a", "b", "c"} {
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":%q}}]}\n\n", tok)
		}
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":60}}}\n\n")
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	defer srv.Close()
	out := mustRun(t, "loadgen", "--url", srv.URL, "--trace", smallTrace, "--format", "weka", "--concurrency", "1")
	if !strings.Contains(out, "requests 5 (errors 0, cut off by the run's end 0)") || !strings.Contains(out, "cached tokens 300 (60.0% of prompt)") {
		t.Errorf("report:\n%s", out)
	}
	if sessions["trace_test"] != 3 || sessions["trace_test/agent_001"] != 2 || parents != 2 {
		t.Errorf("sessions %v, %d with a parent header", sessions, parents)
	}
}

// TestLoadgenSessionTree drives hand-built session trees through
// (*loadgen).session against a server that records which session sent each
// request, in order: the walk's order (sub-agents before the turn that waits
// for them, the tail before the end), --max-turns, the request budget and
// the gaps. Only lower bounds of time are asserted: an upper bound would be
// a flaky test.
func TestLoadgenSessionTree(t *testing.T) {
	turn := func(gap time.Duration, children ...int) trace.Turn {
		return trace.Turn{InputLen: 100, OutputLen: 10, Gap: gap, Children: children}
	}
	sess := func(id string, parent int, tail []int, turns ...trace.Turn) *trace.Session {
		return &trace.Session{ID: id, Parent: parent, Turns: turns, Tail: tail}
	}
	tests := []struct {
		name     string
		sessions []*trace.Session
		gapScale float64
		maxTurns int
		budget   int
		// cancelOn cancels the run when the server sees this session.
		cancelOn string
		want     []string
		// minSpan is the least time from the first request to the last.
		minSpan time.Duration
	}{{
		name: "sub-agents before a turn, no gaps at scale 0",
		sessions: []*trace.Session{
			sess("a", -1, nil, turn(0), turn(time.Hour, 1)),
			sess("a/b", 0, nil, turn(0), turn(time.Hour)),
		},
		want: []string{"a", "a/b", "a/b", "a"},
	}, {
		name: "tail sub-agents run before the session ends",
		sessions: []*trace.Session{
			sess("a", -1, []int{1}, turn(0), turn(0)),
			sess("a/b", 0, nil, turn(0), turn(0)),
		},
		want: []string{"a", "a", "a/b", "a/b"},
	}, {
		name: "max turns skips later turns and their sub-agents, not the tail",
		sessions: []*trace.Session{
			sess("a", -1, []int{2}, turn(0), turn(0, 1)),
			sess("a/b", 0, nil, turn(0)),
			sess("a/c", 0, nil, turn(0), turn(0)),
		},
		maxTurns: 1,
		want:     []string{"a", "a/c"},
	}, {
		name: "the budget stops every session at its next turn",
		sessions: []*trace.Session{
			sess("a", -1, nil, turn(0), turn(0, 1)),
			sess("a/b", 0, nil, turn(0), turn(0)),
		},
		budget: 2,
		want:   []string{"a", "a/b"},
	}, {
		// Were the first gap waited (30 hours scaled), the run would hit
		// its deadline before sending anything.
		name: "the first turn goes at once, later gaps are scaled",
		sessions: []*trace.Session{
			sess("a", -1, nil, turn(time.Hour), turn(time.Millisecond)),
		},
		gapScale: 30,
		want:     []string{"a", "a"},
		minSpan:  30 * time.Millisecond,
	}, {
		// Were a/b started only after a's hour-long gap, the run would hit
		// its deadline first and a/b would send nothing.
		name: "sub-agents start with the gap, not after it",
		sessions: []*trace.Session{
			sess("a", -1, nil, turn(0), turn(time.Hour, 1)),
			sess("a/b", 0, nil, turn(0)),
		},
		gapScale: 1,
		cancelOn: "a/b",
		want:     []string{"a", "a/b"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var mu sync.Mutex
			var got []string
			var first, last time.Time
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				id := r.Header.Get("x-dynamo-session-id")
				mu.Lock()
				got = append(got, id)
				if first.IsZero() {
					first = time.Now()
				}
				last = time.Now()
				mu.Unlock()
				if id == tc.cancelOn {
					cancel()
				}
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
				fmt.Fprint(w, "data: [DONE]\n\n")
			}))
			defer srv.Close()
			client := srv.Client()
			defer client.CloseIdleConnections()
			budget := tc.budget
			if budget == 0 {
				budget = 100
			}
			lg := &loadgen{url: srv.URL, w: &trace.Workload{Name: "tree", BlockSize: 64, Sessions: tc.sessions}, client: client,
				tokenScale: 0.01, gapScale: tc.gapScale, maxTurns: tc.maxTurns, budget: budget}
			lg.session(ctx, 0)
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(got, tc.want) {
				t.Errorf("requests from %q, want %q", got, tc.want)
			}
			if span := last.Sub(first); span < tc.minSpan {
				t.Errorf("requests over %v, want at least %v", span, tc.minSpan)
			}
		})
	}
}

// Values that would send nothing, or build prompts no server takes (the
// prompts are built in memory: --token-scale 1e9 ran out of it), are refused
// by the flag's name before a request is sent.
func TestLoadgenRefusesOutOfRangeValues(t *testing.T) {
	expectRefused(t, []string{"loadgen", "--trace", smallTrace}, []refusal{
		{"--token-scale 1e9", "--token-scale"}, {"--token-scale 0", "--token-scale"}, {"--token-scale NaN", "--token-scale"},
		{"--url bogus", "--url"}, {"--url ftp://127.0.0.1:1", "--url"}, {"--concurrency 0", "--concurrency"},
		{"--sessions -1", "--sessions"}, {"--max-turns -1", "--max-turns"}, {"--max-requests 0", "--max-requests"},
		{"--gap-scale -1", "--gap-scale"}, {"--timeout 0s", "--timeout"}, {"--timed", "--timed needs --gap-scale"},
	})
}

// TestHeaderIDKeepsLongIDsApart: a trace's session id too long (or not
// printable) for the session header is sent as a digest, distinct per id;
// an id the header takes is sent as it is.
func TestHeaderIDKeepsLongIDsApart(t *testing.T) {
	long := strings.Repeat("t", 200) + "/" + strings.Repeat("s", 100)
	a, b := headerID(long+"a"), headerID(long+"b")
	if a == b || agentctx.ValidateID(a) != nil || agentctx.ValidateID(b) != nil {
		t.Fatalf("digests %q and %q", a, b)
	}
	if got := headerID("acme/s-1"); got != "acme/s-1" {
		t.Fatalf("a valid id sent as %q", got)
	}
}

// The run's end is not the endpoint's error: requests its --timeout or an
// interrupt cut off are counted apart, quantiles without samples are n/a,
// not 0.0, and an interrupted run exits with an error.
func TestLoadgenCountsWhatItsEndCutOff(t *testing.T) {
	hung := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-hung:
		}
	}))
	defer srv.Close()
	defer close(hung)
	args := []string{"loadgen", "--url", srv.URL, "--trace", smallTrace, "--format", "weka", "--concurrency", "1"}
	var out bytes.Buffer
	err := run(context.Background(), append(args, "--timeout", "300ms"), &out, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "no request completed") {
		t.Errorf("a run in which nothing completed: %v, want an error", err)
	}
	if !strings.Contains(out.String(), "requests 0 (errors 0, cut off by the run's end 1)") || !strings.Contains(out.String(), "TTFT ms p50 n/a p99 n/a") {
		t.Errorf("a run its --timeout ended:\n%s", out.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	var stdout, stderr bytes.Buffer
	if err := run(ctx, args, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Errorf("an interrupted run: %v\n%s", err, stdout.String())
	}
}
