package servicekit

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// rawPost sends a POST's head to addr and what of its body is given, and
// returns the status line and body of the first answer, read without
// sending the rest: a server that answers before the body is read answers
// here.
func rawPost(t *testing.T, addr, head, body string) (statusLine, answer string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, head+body); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.Status, string(b)
}

// A REST body is bounded and must arrive in time, and one over the bound is
// refused from its announced length before any of it is read: a client
// that waits to be told to continue (Expect: 100-continue) is told 413
// instead.
func TestRESTBodiesAreBoundedAndTimed(t *testing.T) {
	r := start(t, Options{HTTPAddr: "127.0.0.1:0"})
	addr := r.srv.HTTPAddr()
	url := "http://" + addr + "/v1/echo"

	resp, err := http.Post(url, "application/json", strings.NewReader(strings.Repeat("x", 100_000)))
	if err != nil {
		t.Fatal(err)
	}
	if b := body(t, resp); resp.StatusCode != http.StatusOK || b != "100000" {
		t.Fatalf("a 100,000-byte body: %d %q, want 200 and every byte read", resp.StatusCode, b)
	}

	head := fmt.Sprintf("POST /v1/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", MaxRESTBody+1)
	if st, b := rawPost(t, addr, head, ""); !strings.HasPrefix(st, "413") || !strings.Contains(b, `"message":"request body of 16777217 bytes`) {
		t.Fatalf("an announced body over the bound: %s %s, want 413 before any of it is sent", st, b)
	}

	// Chunked, its length unknown until it has come.
	req, _ := http.NewRequest(http.MethodPost, url, io.LimitReader(zeros{}, MaxRESTBody+1))
	req.ContentLength = -1
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if b := body(t, resp); resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(b, `"code":3`) {
		t.Fatalf("a chunked body over the bound: %d %s, want 413 in the gateway's error JSON", resp.StatusCode, b)
	}

	defer func(d time.Duration) { restBodyTimeout = d }(restBodyTimeout)
	restBodyTimeout = 200 * time.Millisecond
	start := time.Now()
	st, b := rawPost(t, addr, "POST /v1/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n", "only ten..")
	if !strings.HasPrefix(st, "408") || !strings.Contains(b, "did not arrive within 200ms") {
		t.Fatalf("a body that stops coming: %s %s, want 408", st, b)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("a body that stops coming was answered after %v", waited)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// Under mutual TLS a REST caller without a mesh identity is refused before
// its body is read: the answer comes while the body has not been sent.
func TestRESTCallerWithoutIdentityRefusedBeforeItsBody(t *testing.T) {
	ca, err := NewDevCA("")
	if err != nil {
		t.Fatal(err)
	}
	srv := secureScheduler(t, ca)
	pr, pw := io.Pipe()
	// Never written; closed after a while so that a server that waits for
	// the body fails the test instead of hanging it.
	defer time.AfterFunc(10*time.Second, func() { pw.Close() }).Stop()
	defer pw.Close()
	req, _ := http.NewRequest(http.MethodPost, "https://"+srv.HTTPAddr()+"/v1/route", pr)
	req.ContentLength = 10 << 20 // never sent: the pipe is not written
	resp, err := httpsClient(t, ca, nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if b := body(t, resp); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(b, "a client certificate with a mesh identity is required") {
		t.Fatalf("POST /v1/route without a certificate: %d %s, want 401 before the body", resp.StatusCode, b)
	}
}

// The gateway a service mounts under a path of its own (GatewayHandler) is
// guarded as "/" is.
func TestMountedGatewayIsGuarded(t *testing.T) {
	r := start(t, Options{HTTPAddr: "127.0.0.1:0"})
	req := httptest.NewRequest(http.MethodPost, "/v1/echo", strings.NewReader("{}"))
	req.ContentLength = MaxRESTBody + 1
	w := httptest.NewRecorder()
	r.srv.GatewayHandler().ServeHTTP(w, req)
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("an announced body over the bound through GatewayHandler: %d %s", w.Code, w.Body)
	}
}

// A path or query that is not UTF-8 is the caller's error, a 400: the
// gateway failed to marshal the call it made of it, a 500 nobody logged.
func TestRESTPathOrQueryNotUTF8Is400(t *testing.T) {
	r := start(t, Options{HTTPAddr: "127.0.0.1:0"})
	for _, path := range []string{"/v1/echo/%ff%fe", "/v1/echo/x?tenant=%ff", "/v1/echo/x?%fe=1"} {
		resp, err := http.Get("http://" + r.srv.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		if b := body(t, resp); resp.StatusCode != http.StatusBadRequest || !strings.Contains(b, "not UTF-8") {
			t.Errorf("GET %s: %d %s, want 400", path, resp.StatusCode, b)
		}
	}
	if resp := get(t, "http://"+r.srv.HTTPAddr()+"/v1/echo/h%C3%A9llo?tenant=%C3%A9", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("a UTF-8 path: %d", resp.StatusCode)
	}
}
