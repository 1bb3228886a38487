package servicekit

import (
	"net/http"
	"strings"
	"testing"
)

func TestPprofIsOffByDefault(t *testing.T) {
	r := start(t, Options{HTTPAddr: "127.0.0.1:0"})
	if resp := get(t, "http://"+r.srv.HTTPAddr()+"/debug/pprof/", nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /debug/pprof/ without --pprof: %d, want 404", resp.StatusCode)
	}
}

// Without any mesh authentication the flag alone opens the profiles, as every
// other call of such a mesh is open.
func TestPprofServesTheProfiles(t *testing.T) {
	r := start(t, Options{HTTPAddr: "127.0.0.1:0", Pprof: true})
	base := "http://" + r.srv.HTTPAddr()
	resp := get(t, base+"/debug/pprof/", nil)
	if b := body(t, resp); resp.StatusCode != http.StatusOK || !strings.Contains(b, "goroutine") {
		t.Fatalf("GET /debug/pprof/: %d %.200s", resp.StatusCode, b)
	}
	if resp := get(t, base+"/debug/pprof/goroutine?debug=1", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /debug/pprof/goroutine: %d", resp.StatusCode)
	}
	// The command line may carry secrets (--api-keys): not served.
	if resp := get(t, base+"/debug/pprof/cmdline", nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /debug/pprof/cmdline: %d, want 404", resp.StatusCode)
	}
}

func TestPprofNeedsAnAdminCertificate(t *testing.T) {
	ca, err := NewDevCA("")
	if err != nil {
		t.Fatal(err)
	}
	srv := secureScheduler(t, ca, func(o *Options) { o.Pprof = true })
	for _, tt := range byIdentity(http.StatusOK, http.StatusForbidden, http.StatusForbidden) {
		resp, err := httpsClient(t, ca, tt.id).Get("https://" + srv.HTTPAddr() + "/debug/pprof/symbol")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s: GET /debug/pprof/symbol: %d, want %d", tt.name, resp.StatusCode, tt.want)
		}
	}
}

// On a public port the service decides (the frontend: an operator's key);
// with no guard set, nobody reads the profiles there.
func TestPprofOnAPublicPortAsksTheService(t *testing.T) {
	var srv *Server
	r := startWith(t, Options{HTTPAddr: "127.0.0.1:0", Pprof: true, PublicHTTP: true}, func(s *Server) { srv = s })
	url := "http://" + r.srv.HTTPAddr() + "/debug/pprof/symbol"
	if resp := get(t, url, nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("no guard: %d, want 403", resp.StatusCode)
	}
	srv.GuardDebug(func(r *http.Request) bool { return r.Header.Get("X-Api-Key") == "operator" })
	if resp := get(t, url, http.Header{"X-Api-Key": {"tenant"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a key the guard refuses: %d, want 403", resp.StatusCode)
	}
	if resp := get(t, url, http.Header{"X-Api-Key": {"operator"}}); resp.StatusCode != http.StatusOK {
		t.Errorf("a key the guard allows: %d, want 200", resp.StatusCode)
	}
}
