package frontend

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fixtureDir holds requests captured from real agent CLIs (see its README),
// kept beside the identity rules they test.
const fixtureDir = "../../pkg/agentctx/testdata/agents"

type fixture struct {
	Scenario string          `json:"scenario"`
	Run      string          `json:"run"`
	Marker   string          `json:"marker"`
	Method   string          `json:"method"`
	Path     string          `json:"path"`
	Headers  [][2]string     `json:"headers"`
	Body     json.RawMessage `json:"body"`
}

func loadFixtures(t *testing.T) []fixture {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(fixtureDir, "*.jsonl"))
	if len(files) == 0 {
		t.Fatal("no fixtures at " + fixtureDir)
	}
	var out []fixture
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			var fx fixture
			if err := json.Unmarshal(sc.Bytes(), &fx); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if fx.Marker == "" {
				out = append(out, fx)
			}
		}
	}
	return out
}

// expectedSession is the session id the identity table implies for a
// fixture's harness.
func expectedSession(fx fixture) string {
	h := http.Header{}
	for _, kv := range fx.Headers {
		h.Add(kv[0], kv[1])
	}
	switch {
	case strings.HasPrefix(fx.Scenario, "claude"):
		return h.Get("X-Claude-Code-Session-Id")
	case strings.HasPrefix(fx.Scenario, "codex"):
		return h.Get("thread-id")
	default:
		return h.Get("x-session-id")
	}
}

// TestReplayFixtures sends every captured request, with its original headers
// and body, and checks a valid answer in the API's own streaming shape and the
// session identity reaching the scheduler.
func TestReplayFixtures(t *testing.T) {
	fixtures := loadFixtures(t)
	m := newMesh(t, func(c *Config, _ *fakeShim) {
		c.SimToolCalls = true
		// Each harness sends its own model name; a deployment lists them.
		for _, fx := range fixtures {
			var body struct{ Model string }
			if json.Unmarshal(fx.Body, &body) == nil && body.Model != "" {
				c.ModelAliases = append(c.ModelAliases, body.Model)
			}
		}
	})
	replayed := map[string]int{}
	for _, fx := range fixtures {
		api := ""
		switch {
		case fx.Method == http.MethodHead:
			api = "head"
		case strings.HasPrefix(fx.Path, "/v1/chat/completions"):
			api = apiChat
		case strings.HasPrefix(fx.Path, "/v1/messages"):
			api = apiMessages
		case strings.HasPrefix(fx.Path, "/v1/responses"):
			api = apiResponses
		}
		if api == "" || !implemented[api] {
			continue
		}
		req, err := http.NewRequest(fx.Method, m.url+fx.Path, bytes.NewReader(fx.Body))
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range fx.Headers {
			switch strings.ToLower(kv[0]) {
			case "host", "content-length", "accept-encoding", "connection":
				continue
			}
			req.Header.Add(kv[0], kv[1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		events, datas := sseEvents(t, resp.Body)
		resp.Body.Close()
		name := fx.Scenario + " " + fx.Run + " " + fx.Path
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d: %q", name, resp.StatusCode, datas)
		}
		replayed[api]++
		if api == "head" {
			continue
		}
		if resp.Header.Get(workerHeader) != "worker-7" {
			t.Errorf("%s: no worker header", name)
		}
		switch api {
		case apiChat:
			if len(datas) < 3 || datas[len(datas)-1] != "[DONE]" {
				t.Errorf("%s: chat stream %q", name, datas)
			}
		case apiMessages:
			if len(events) < 4 || events[0] != "message_start" || events[len(events)-1] != "message_stop" || events[len(events)-2] != "message_delta" {
				t.Errorf("%s: messages events %q", name, events)
			}
		case apiResponses:
			if len(events) < 3 || events[0] != "response.created" || events[len(events)-1] != "response.completed" {
				t.Errorf("%s: responses events %q", name, events)
			}
		}
		m.waitFinish(t)
		if got, want := m.sched.lastRoute().GetAgent().GetSessionId(), expectedSession(fx); got != want || want == "" {
			t.Errorf("%s: session %q, want %q", name, got, want)
		}
	}
	if replayed[apiChat] == 0 || replayed[apiMessages] == 0 || replayed[apiResponses] == 0 {
		t.Fatalf("replayed %v", replayed)
	}
	t.Logf("replayed %v", replayed)
}

// implemented lists the APIs the replay test covers.
var implemented = map[string]bool{"head": true, apiChat: true, apiMessages: true, apiResponses: true}
