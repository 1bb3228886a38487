package frontend

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// serverTimingValue is the header serverTiming writes: route, engine when
// the engine timed itself, total.
var serverTimingValue = regexp.MustCompile(`^route;dur=([0-9.]+)(?:, engine;dur=([0-9.]+))?, total;dur=([0-9.]+)$`)

func TestServerTiming(t *testing.T) {
	m := newMesh(t, func(c *Config, f *fakeShim) {
		c.ServerTiming = true
		f.engineMs = 12.5
	})
	answers := []struct {
		name, path, body string
		streamed         bool
	}{
		{"chat", "/v1/chat/completions", turn1, false},
		{"chat streamed", "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"Say hello."}]}`, true},
		{"messages", "/v1/messages", msgBody(false, "aaaaa", ""), false},
		{"messages streamed", "/v1/messages", msgBody(true, "aaaaa", ""), true},
		{"responses", "/v1/responses", `{"model":"m","input":"Say hello to the whole world, please."}`, false},
		{"responses streamed", "/v1/responses", `{"model":"m","stream":true,"input":"Say hello to the whole world, please."}`, true},
	}
	for _, a := range answers {
		t.Run(a.name, func(t *testing.T) {
			resp := post(t, m.url+a.path, a.body, "anthropic-version", "2023-06-01")
			body := readAll(t, resp.Body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			got := resp.Header.Get("Server-Timing")
			if a.streamed {
				// Its header went out with the first token, before any of it
				// was known: the timing follows the body as a trailer.
				if got != "" {
					t.Errorf("streamed answer: Server-Timing header %q, want it in the trailer", got)
				}
				got = resp.Trailer.Get("Server-Timing")
			} else if _, declared := resp.Trailer["Server-Timing"]; declared {
				t.Errorf("answer not streamed: it declares a Server-Timing trailer")
			}
			parts := serverTimingValue.FindStringSubmatch(got)
			if parts == nil {
				t.Fatalf("Server-Timing %q, want route, engine and total", got)
			}
			route, _ := strconv.ParseFloat(parts[1], 64)
			total, _ := strconv.ParseFloat(parts[3], 64)
			if parts[2] != "12.500" {
				t.Errorf("engine;dur=%s, want the engine's 12.500", parts[2])
			}
			if route <= 0 || route > total {
				t.Errorf("route %.3f ms, total %.3f ms: want 0 < route ≤ total", route, total)
			}
		})
	}
}

func TestServerTimingIsOffByDefault(t *testing.T) {
	m := newMesh(t, func(_ *Config, f *fakeShim) { f.engineMs = 12.5 })
	for _, body := range []string{turn1, streamTurn1} {
		resp := postOK(t, m.url+"/v1/chat/completions", body)
		readAll(t, resp.Body)
		if got := resp.Header.Get("Server-Timing"); got != "" || len(resp.Trailer) > 0 {
			t.Errorf("without --server-timing: Server-Timing %q, trailers %v", got, resp.Trailer)
		}
	}
}

// An engine that does not time itself (a real engine's adapter may not)
// leaves engine out rather than claiming 0 ms.
func TestServerTimingWithoutTheEnginesTime(t *testing.T) {
	m := newMesh(t, func(c *Config, _ *fakeShim) { c.ServerTiming = true })
	resp := postOK(t, m.url+"/v1/chat/completions", turn1)
	if parts := serverTimingValue.FindStringSubmatch(resp.Header.Get("Server-Timing")); parts == nil || parts[2] != "" {
		t.Errorf("Server-Timing %q, want route and total only", resp.Header.Get("Server-Timing"))
	}
}

// A turn that migrates was routed twice: route counts both calls (the
// engine's time is the answering worker's; the failed one reported none).
func TestServerTimingAfterAMigration(t *testing.T) {
	const delay = 30 * time.Millisecond
	m := newMesh(t, func(c *Config, _ *fakeShim) { c.ServerTiming = true })
	m.sched.mu.Lock()
	m.sched.routeDelay = delay
	m.sched.mu.Unlock()
	failBefore(status.Error(codes.Unavailable, "engine restarting"))(t, m)
	m.addShim(t, "worker-8", func(f *fakeShim) { f.engineMs = 7.25 })

	resp := postOK(t, m.url+"/v1/chat/completions", turn1, "x-session-id", "ses_st")
	if got := resp.Header.Get(workerHeader); got != "worker-8" {
		t.Fatalf("%s = %q, want worker-8 (the turn migrated)", workerHeader, got)
	}
	parts := serverTimingValue.FindStringSubmatch(resp.Header.Get("Server-Timing"))
	if parts == nil {
		t.Fatalf("Server-Timing %q", resp.Header.Get("Server-Timing"))
	}
	if route, _ := strconv.ParseFloat(parts[1], 64); route < 2*float64(delay.Milliseconds()) {
		t.Errorf("route;dur=%.3f after two Route calls of at least %v each", route, delay)
	}
	if parts[2] != "7.250" {
		t.Errorf("engine;dur=%s, want the answering worker's 7.250", parts[2])
	}
}

// A streamed request answered with an error instead (here admission shed
// it) gets a whole error body, which declares no trailer.
func TestServerTimingLeavesErrorsAlone(t *testing.T) {
	m := newMesh(t, func(c *Config, _ *fakeShim) { c.ServerTiming = true })
	m.sched.mu.Lock()
	m.sched.routeErr = status.Error(codes.ResourceExhausted, "admission: the fleet is full")
	m.sched.mu.Unlock()
	resp := post(t, m.url+"/v1/chat/completions", streamTurn1)
	body := readAll(t, resp.Body)
	if resp.StatusCode != 429 {
		t.Fatalf("status %d: %s, want 429", resp.StatusCode, body)
	}
	if _, declared := resp.Trailer["Server-Timing"]; declared || resp.ContentLength < 0 {
		t.Errorf("error answer: trailers %v, Content-Length %d; want none and the body's length", resp.Trailer, resp.ContentLength)
	}
}
