package frontend

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/servicetest"
)

// getAdmin GETs an admin path with optional header pairs.
func getAdmin(t *testing.T, m *mesh, path string, header ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, m.url+path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, readAll(t, resp.Body)
}

// TestOperatorKey: an operator key reads every tenant's sessions and serves
// no inference.
func TestOperatorKey(t *testing.T) {
	m := newMesh(t, func(c *Config, _ *fakeShim) {
		c.APIKeys = map[string]string{"k-a": "acme", "k-b": "bravo", "k-op": OperatorTenant}
	})
	for _, k := range []string{"k-a", "k-b"} {
		resp := post(t, m.url+"/v1/chat/completions", turn1, "Authorization", "Bearer "+k, "x-session-id", "s-"+k)
		readAll(t, resp.Body)
		m.waitFinish(t)
	}
	if code, b := getAdmin(t, m, "/v1/admin/sessions", "Authorization", "Bearer k-op"); code != 200 || !strings.Contains(b, "acme") || !strings.Contains(b, "bravo") {
		t.Errorf("operator's admin list: %d %s", code, b)
	}
	// The key in x-api-key, as the inference APIs take it, reaches the
	// admin API through the REST gateway too.
	if code, b := getAdmin(t, m, "/v1/admin/sessions", "x-api-key", "k-op"); code != 200 || !strings.Contains(b, "acme") || !strings.Contains(b, "bravo") {
		t.Errorf("operator's admin list with x-api-key: %d %s", code, b)
	}
	if code, b := getAdmin(t, m, "/v1/admin/sessions", "x-api-key", "k-a"); code != 200 || !strings.Contains(b, "acme") || strings.Contains(b, "bravo") {
		t.Errorf("acme's admin list with x-api-key: %d %s", code, b)
	}
	resp := post(t, m.url+"/v1/chat/completions", turn1, "Authorization", "Bearer k-op")
	if b := readAll(t, resp.Body); resp.StatusCode != 401 || !strings.Contains(b, "admin API only") {
		t.Errorf("inference with an operator key: %d %s", resp.StatusCode, b)
	}
}

// TestAdminNeedsAKeyOffLoopback: without any key configured the admin API is
// open only on a loopback port (switchyard up); elsewhere a 401.
func TestAdminNeedsAKeyOffLoopback(t *testing.T) {
	m := newMesh(t, nil)
	if !m.svc.adminOpen {
		t.Fatal("a keyless frontend on loopback must leave the admin API open")
	}
	if code, b := getAdmin(t, m, "/v1/admin/sessions"); code != 200 {
		t.Fatalf("loopback, no keys: %d %s", code, b)
	}
	m.svc.adminOpen = false // as on ":8000"
	if code, b := getAdmin(t, m, "/v1/admin/sessions"); code != 401 || !strings.Contains(b, "needs an API key") {
		t.Errorf("no keys, not loopback: %d %s", code, b)
	}
}

// TestProfilesNeedAnOperatorKey: with --pprof and keys configured, the
// profiles on the public port are an operator key's only.
func TestProfilesNeedAnOperatorKey(t *testing.T) {
	opts := servicekit.Options{Name: "frontend", HTTPAddr: "127.0.0.1:0", PublicHTTP: true, Pprof: true}
	m := newMeshOn(t, opts, func(c *Config, _ *fakeShim) {
		c.APIKeys = map[string]string{"k-a": "acme", "k-op": OperatorTenant}
	})
	for key, want := range map[string]int{"": 403, "k-a": 403, "k-op": 200} {
		if code, b := getAdmin(t, m, "/debug/pprof/symbol", "Authorization", "Bearer "+key); code != want {
			t.Errorf("key %q: %d %.100s, want %d", key, code, b, want)
		}
	}
}

// TestTenantLimits: past its requests per second or its generations at once
// a tenant gets a 429 with Retry-After in its API's shape; another tenant
// is not affected.
func TestTenantLimits(t *testing.T) {
	t.Run("rate", func(t *testing.T) {
		m := newMesh(t, func(c *Config, _ *fakeShim) {
			c.APIKeys = map[string]string{"k-a": "acme", "k-b": "bravo"}
			c.TenantRPS = 1
		})
		now := time.Unix(1000, 0)
		m.svc.limits.now = func() time.Time { return now }
		for i, want := range []int{200, 429} {
			resp := post(t, m.url+"/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "x-api-key", "k-a")
			b := readAll(t, resp.Body)
			if resp.StatusCode != want {
				t.Fatalf("request %d: %d %s, want %d", i, resp.StatusCode, b, want)
			}
			if want == 429 && (resp.Header.Get("Retry-After") != "1" || !strings.Contains(b, `"type":"rate_limit_error"`)) {
				t.Errorf("429 without Retry-After or Anthropic's shape: %q %s", resp.Header.Get("Retry-After"), b)
			}
			if want == 200 {
				m.waitFinish(t)
			}
		}
		resp := post(t, m.url+"/v1/chat/completions", turn1, "x-api-key", "k-b")
		if readAll(t, resp.Body); resp.StatusCode != 200 {
			t.Errorf("another tenant refused: %d", resp.StatusCode)
		}
		m.waitFinish(t)
		now = now.Add(time.Second) // the bucket refills
		resp = post(t, m.url+"/v1/chat/completions", turn1, "x-api-key", "k-a")
		if readAll(t, resp.Body); resp.StatusCode != 200 {
			t.Errorf("a second later: %d", resp.StatusCode)
		}
	})
	t.Run("streams", func(t *testing.T) {
		m := newMesh(t, func(c *Config, s *fakeShim) {
			c.APIKeys = map[string]string{"k-a": "acme"}
			c.TenantStreams = 1
			s.stall = true
		})
		leave := m.chatInBackground(t, "x-api-key", "k-a")
		resp := post(t, m.url+"/v1/chat/completions", turn1, "x-api-key", "k-a")
		if b := readAll(t, resp.Body); resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(b, "generations at once") {
			t.Errorf("second stream: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
		}
		// A token count takes no generation slot (TestTokenCountsAreRateLimited).
		resp = post(t, m.url+"/v1/messages/count_tokens", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "x-api-key", "k-a")
		if b := readAll(t, resp.Body); resp.StatusCode != 200 || !strings.Contains(b, "input_tokens") {
			t.Errorf("a count beside a generation at the tenant's bound: %d %s", resp.StatusCode, b)
		}
		leave()
	})
}

// A token count is a request a tenant's rate bounds, like a generation (it
// takes no generation slot: TestTenantLimits/streams).
func TestTokenCountsAreRateLimited(t *testing.T) {
	const count = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	t.Run("rate", func(t *testing.T) {
		m := newMesh(t, func(c *Config, _ *fakeShim) {
			c.APIKeys = map[string]string{"k-a": "acme"}
			c.TenantRPS = 1
		})
		now := time.Unix(1000, 0)
		m.svc.limits.now = func() time.Time { return now }
		for i, want := range []int{200, 429} {
			resp := post(t, m.url+"/v1/messages/count_tokens", count, "x-api-key", "k-a")
			if b := readAll(t, resp.Body); resp.StatusCode != want {
				t.Fatalf("count %d: %d %s, want %d", i, resp.StatusCode, b, want)
			}
		}
	})
}

// TestModelListNeedsAKey: with tenants' keys configured, the model list
// answers a tenant's or an operator's key and refuses none or a wrong one
// with a 401 in the API's shape; without keys it is open (TestModelsAndRoot).
func TestModelListNeedsAKey(t *testing.T) {
	m := newMesh(t, func(c *Config, _ *fakeShim) {
		c.APIKeys = map[string]string{"k-a": "acme", "k-op": OperatorTenant}
	})
	for _, path := range []string{"/v1/models", "/v1/models/switchyard-sim"} {
		for _, c := range []struct {
			header []string
			want   int
		}{
			{nil, 401},
			{[]string{"x-api-key", "wrong"}, 401},
			{[]string{"x-api-key", "k-a"}, 200},
			{[]string{"Authorization", "Bearer k-a"}, 200},
			{[]string{"Authorization", "Bearer k-op"}, 200},
		} {
			code, b := getAdmin(t, m, path, c.header...)
			if code != c.want || c.want == 401 && !strings.Contains(b, `"invalid_api_key"`) {
				t.Errorf("GET %s with %v: %d %.120s, want %d", path, c.header, code, b, c.want)
			}
		}
	}
}

// A keyless frontend reached beyond loopback serves anyone: said at start,
// on loopback (switchyard up) not.
func TestKeylessBeyondLoopbackIsSaid(t *testing.T) {
	for _, tt := range []struct {
		addr string
		warn bool
	}{{"127.0.0.1:0", false}, {":0", true}} {
		var logs lockedBuffer
		opts := servicekit.Options{Name: "frontend", HTTPAddr: tt.addr, PublicHTTP: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
		newMeshOn(t, opts, nil)
		if said := strings.Contains(logs.String(), "no API keys and a port beyond loopback"); said != tt.warn {
			t.Errorf("keyless on %s: warned %v, want %v", tt.addr, said, tt.warn)
		}
	}
}

// A rejected request is logged without its content, though the message the
// client gets quotes it.
func TestRejectionsAreLoggedWithoutContent(t *testing.T) {
	var logs lockedBuffer
	m := newMeshOn(t, servicekit.Options{Name: "frontend", HTTPAddr: "127.0.0.1:0", PublicHTTP: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}, nil)
	resp := post(t, m.url+"/v1/chat/completions", `{"model":"m","messages":[{"role":"LOGLEAK-secret","content":"hi"}]}`)
	if body := readAll(t, resp.Body); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "LOGLEAK") {
		t.Fatalf("status %d: %s; want a 400 that names the bad role", resp.StatusCode, body)
	}
	if !servicetest.Poll(servicetest.Patience, func() bool { return strings.Contains(logs.String(), "request rejected") }) {
		t.Fatal("the rejection was not logged")
	}
	if strings.Contains(logs.String(), "LOGLEAK") {
		t.Errorf("the log holds the request's content:\n%s", logs.String())
	}
}
