package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
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
	src := filepath.Join("..", "..", "pkg", "trace", "testdata", "weka_small.json")
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"loadgen", "--url", srv.URL, "--trace", src, "--format", "weka", "--concurrency", "1"}, &stdout, &stderr); err != nil {
		t.Fatalf("loadgen: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, "requests 5 (errors 0)") || !strings.Contains(out, "cached tokens 300 (60.0% of prompt)") {
		t.Errorf("report:\n%s", out)
	}
	if sessions["trace_test"] != 3 || sessions["trace_test/agent_001"] != 2 || parents != 2 {
		t.Errorf("sessions %v, %d with a parent header", sessions, parents)
	}
}
