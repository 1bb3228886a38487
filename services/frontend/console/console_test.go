package console_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.uber.org/goleak"

	"switchyard.dev/services/frontend/console"
	"switchyard.dev/services/frontend/console/consoletest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"))
}

// fixture is testdata/state.json, decoded strictly into the contract
// (console.State): the fixture is the contract.
func fixture(t *testing.T) console.State {
	t.Helper()
	raw, err := os.ReadFile("testdata/state.json")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var st console.State
	if err := dec.Decode(&st); err != nil {
		t.Fatalf("testdata/state.json is not the contract: %v", err)
	}
	return st
}

func session(st console.State, id string) *console.Session {
	for i := range st.Sessions {
		if st.Sessions[i].SessionID == id {
			return &st.Sessions[i]
		}
	}
	return nil
}

// withTurn is st one frame later, with one more turn of session id.
func withTurn(st console.State, id string, tr console.Turn) console.State {
	next := st
	next.At = st.At.Add(time.Second)
	next.Sessions = slices.Clone(st.Sessions)
	s := session(next, id)
	s.RecentTurns = append(slices.Clone(s.RecentTurns), tr)
	prompt, cached := uint64(tr.PromptTokens), uint64(tr.CachedTokens)
	s.Turns++
	s.PromptTokens += prompt
	s.CachedTokens += cached
	s.IdealCachedTokens += cached
	s.CompletionTokens += uint64(tr.CompletionTokens)
	s.LastSeen = tr.At
	next.Cache.Turns++
	next.Cache.PromptTokens += prompt
	next.Cache.CachedTokens += cached
	next.Cache.IdealCachedTokens += cached
	return next
}

func TestFixtureIsTheContract(t *testing.T) {
	st := fixture(t)
	if len(st.Workers) != 4 {
		t.Errorf("%d workers, want 4", len(st.Workers))
	}
	root, sub := session(st, "sess-root"), session(st, "agent-explore-1")
	if root == nil || sub == nil {
		t.Fatalf("fixture lacks the root session or its sub-agent")
	}
	if len(root.RecentTurns) != 2 || root.RecentTurns[1].CachedTokens == 0 {
		t.Errorf("root session: %d turns, want 2 with the second one cached", len(root.RecentTurns))
	}
	if sub.ParentSessionID != root.SessionID || len(sub.RecentTurns) != 1 {
		t.Errorf("sub-agent: parent %q, %d turns; want parent %q and 1 turn", sub.ParentSessionID, len(sub.RecentTurns), root.SessionID)
	}
	// The cache totals are the fleet's since the schedulers started: at
	// least what the sessions listed hold.
	var sum console.Cache
	for _, s := range st.Sessions {
		sum.Turns += uint64(s.Turns)
		sum.PromptTokens += s.PromptTokens
		sum.CachedTokens += s.CachedTokens
	}
	if st.Cache.Turns < sum.Turns || st.Cache.PromptTokens < sum.PromptTokens || st.Cache.CachedTokens < sum.CachedTokens {
		t.Errorf("cache totals %+v, below the sessions' %+v", st.Cache, sum)
	}
}

func get(t *testing.T, h http.Handler, method, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec
}

func TestHandlerServesThePage(t *testing.T) {
	h := console.Handler()
	for _, tc := range []struct {
		path, contentType, contains string
	}{
		{"/console", "text/html", `src="/console/console.js"`},
		{"/console/", "text/html", `href="/console/console.css"`},
		{"/console/console.js", "text/javascript", "/console/events"},
		{"/console/console.css", "text/css", "font-variant-numeric"},
	} {
		rec := get(t, h, http.MethodGet, tc.path)
		if rec.Code != http.StatusOK {
			t.Errorf("GET %s: %d", tc.path, rec.Code)
			continue
		}
		if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, tc.contentType) {
			t.Errorf("GET %s: Content-Type %q, want %s", tc.path, ct, tc.contentType)
		}
		if !strings.Contains(rec.Body.String(), tc.contains) {
			t.Errorf("GET %s: no %q in the body", tc.path, tc.contains)
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "connect-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", tc.path, csp)
		}
	}
	for path, code := range map[string]int{
		"/console/nothing.js":   http.StatusNotFound,
		"/console/index.html":   http.StatusMovedPermanently, // to ./, as FileServer does
		"/consoleother":         http.StatusNotFound,
		"/console/../etc/hosts": http.StatusNotFound,
	} {
		if rec := get(t, h, http.MethodGet, path); rec.Code != code {
			t.Errorf("GET %s: %d, want %d", path, rec.Code, code)
		}
	}
	if rec := get(t, h, http.MethodPost, "/console/"); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /console/: %d, want 405", rec.Code)
	}
}

// TestPageFetchesNothingElsewhere: operators open the console offline, so
// no asset may name another origin (fonts, CDNs); the SVG namespace is a
// name, not a fetch.
func TestPageFetchesNothingElsewhere(t *testing.T) {
	url := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	rec := get(t, console.Handler(), http.MethodGet, "/console/")
	pages := map[string]string{"index.html": rec.Body.String()}
	for _, name := range []string{"console.js", "console.css"} {
		pages[name] = get(t, console.Handler(), http.MethodGet, "/console/"+name).Body.String()
	}
	for name, body := range pages {
		for _, m := range url.FindAllString(body, -1) {
			if m != "http://www.w3.org" {
				t.Errorf("%s names another origin: %s", name, m)
			}
		}
	}
}

// fakeFrontend serves the console and the two data endpoints of the
// contract from frames the test pushes.
type fakeFrontend struct {
	t   *testing.T
	key string // "" serves anyone; else the Bearer key it requires

	mu       sync.Mutex
	frame    []byte
	changed  chan struct{} // closed (and replaced) at every push
	urls     []string      // every request's URL, to check that no key is in one
	unauthed int           // requests answered 401
	// holdEvents, when set, makes the events endpoint answer its first
	// request 503 and hold the second until the channel is closed.
	holdEvents chan struct{}
	events     int
	stop       chan struct{}
}

func serve(t *testing.T, key string, st console.State) (*httptest.Server, *fakeFrontend) {
	t.Helper()
	f := &fakeFrontend{t: t, key: key, changed: make(chan struct{}), stop: make(chan struct{})}
	f.push(st)
	mux := http.NewServeMux()
	mux.Handle("GET /console", console.Handler())
	mux.Handle("GET /console/", console.Handler())
	mux.HandleFunc("GET /console/state", f.serveState)
	mux.HandleFunc("GET /console/events", f.serveEvents)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.urls = append(f.urls, r.URL.String())
		f.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(f.stop) }) // before srv.Close: ends the streams
	return srv, f
}

func (f *fakeFrontend) push(st console.State) {
	raw, err := json.Marshal(st)
	if err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.frame = raw
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeFrontend) current() ([]byte, chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.frame, f.changed
}

func (f *fakeFrontend) authorized(w http.ResponseWriter, r *http.Request) bool {
	if f.key == "" || r.Header.Get("Authorization") == "Bearer "+f.key {
		return true
	}
	f.mu.Lock()
	f.unauthed++
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	io.WriteString(w, `{"error":{"message":"invalid API key","type":"authentication_error"}}`)
	return false
}

func (f *fakeFrontend) serveState(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	frame, _ := f.current()
	w.Header().Set("Content-Type", "application/json")
	w.Write(frame)
}

func (f *fakeFrontend) serveEvents(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	f.mu.Lock()
	f.events++
	n, hold := f.events, f.holdEvents
	f.mu.Unlock()
	if hold != nil {
		switch n {
		case 1:
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		case 2:
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			case <-f.stop:
				return
			}
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	flusher := w.(http.Flusher)
	for {
		frame, changed := f.current()
		// A comment line, CRLF line ends, and the frame in two writes
		// split inside its data and between a CR and its LF: the page's
		// parser takes all of them.
		half := len(frame) / 2
		fmt.Fprintf(w, ": frame\r\nevent: state\r\ndata: %s", frame[:half])
		flusher.Flush()
		fmt.Fprintf(w, "%s\r", frame[half:])
		flusher.Flush()
		io.WriteString(w, "\n\r\n")
		flusher.Flush()
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-f.stop:
			return
		}
	}
}

func (f *fakeFrontend) requestURLs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.urls)
}

// TestPageRendersState opens the console on the fixture and checks each
// section, then pushes a frame with one more turn and sees it appear.
func TestPageRendersState(t *testing.T) {
	st := fixture(t)
	srv, f := serve(t, "", st)
	ctx := consoletest.Browser(t)
	consoletest.Do(t, ctx, "open the console", chromedp.Navigate(srv.URL+"/console"))

	page := consoletest.WaitFor(t, ctx, "four workers, two sessions, live", func(p consoletest.Page) bool {
		return len(p.Workers) == 4 && len(p.Sessions) == 2 && p.Live == "live"
	})
	if got, want := page.WorkerIDs(), []string{"worker-0", "worker-1", "worker-2", "worker-3"}; !slices.Equal(got, want) {
		t.Errorf("worker cards %v, want %v", got, want)
	}
	for _, w := range page.Workers {
		want := "healthy"
		if w.ID == "worker-3" { // 2 s of a 10 s lease left
			want = "expiring"
		}
		if w.Lease != want {
			t.Errorf("%s: lease %q, want %q", w.ID, w.Lease, want)
		}
	}
	if tiers := page.Workers[3].Tiers; len(tiers) != 4 || !strings.Contains(tiers[0], "4,096") || !strings.Contains(tiers[0], "use not reported") {
		t.Errorf("worker-3's tiers %q: want device capacity 4,096 with its use not reported", tiers)
	}
	if tiers := page.Workers[2].Tiers; len(tiers) != 4 || tiers[0] != "device: 3,310 / 4,096" {
		t.Errorf("worker-2's tiers %q: want device: 3,310 / 4,096", tiers)
	}

	root, ok := page.Session("sess-root")
	if !ok || root.Depth != 0 || root.Turns != 2 || root.ParentID != "" {
		t.Fatalf("root session row %+v (shown %v): want a top-level row with 2 turns", root, ok)
	}
	if !root.Paused || !strings.Contains(root.PauseReason, "paused") {
		t.Errorf("root session: paused %v, reason %q; want its paused program with the reason", root.Paused, root.PauseReason)
	}
	if root.Perfetto != "/console/sessions/anonymous/sess-root/perfetto" {
		t.Errorf("root's trace link %q", root.Perfetto)
	}
	if page.Sessions[0].ID != "sess-root" || page.Sessions[1].ID != "agent-explore-1" {
		t.Errorf("session rows %v, want the root then its sub-agent", page.Sessions)
	}
	if sub := page.Sessions[1]; sub.ParentID != "sess-root" || sub.Depth != 1 || sub.Orphan {
		t.Errorf("sub-agent row %+v: want it nested under sess-root", sub)
	}
	if len(page.Turns) != 0 {
		t.Errorf("turns shown before any session is expanded: %v", page.Turns)
	}
	if page.HintRows != 3 || page.HintsSent != "12" {
		t.Errorf("hints: %d recent rows, %q sent; want the fixture's 3 and 12", page.HintRows, page.HintsSent)
	}

	consoletest.Click(t, ctx, `[data-testid="session-row"][data-session-id="sess-root"] [data-testid="session-toggle"]`)
	page = consoletest.WaitFor(t, ctx, "the root's two turns", func(p consoletest.Page) bool { return len(p.Turns) == 2 })
	if page.Admissions != 3 {
		t.Errorf("%d admission decisions shown for the root, want 3", page.Admissions)
	}
	second, ok := page.Turn("chatcmpl-root-2")
	if !ok || second.Cached != 1520 || second.CachedText != "1,520" || second.SessionID != "sess-root" {
		t.Errorf("second turn %+v (shown %v): want 1520 cached tokens, shown as 1,520", second, ok)
	}
	consoletest.Click(t, ctx, `#expand-all`)
	consoletest.WaitFor(t, ctx, "every session's turns", func(p consoletest.Page) bool { return len(p.Turns) == 3 })
	consoletest.Screenshot(t, ctx, "fixture")

	// A second frame: one more turn of the root, which the page shows live.
	f.push(withTurn(st, "sess-root", console.Turn{
		RequestID: "chatcmpl-root-3", At: st.At.Add(time.Second), WorkerID: "worker-2",
		PromptTokens: 1702, CachedTokens: 1616, CompletionTokens: 22, TTFTMs: 18.5, FinishReason: "stop",
	}))
	page = consoletest.WaitFor(t, ctx, "the third turn, live", func(p consoletest.Page) bool {
		_, ok := p.Turn("chatcmpl-root-3")
		return ok
	})
	if root, _ := page.Session("sess-root"); root.Turns != 3 {
		t.Errorf("root session shows %d turns after the update, want 3", root.Turns)
	}
	if third, _ := page.Turn("chatcmpl-root-3"); third.Cached != 1616 {
		t.Errorf("third turn: %d cached, want 1616", third.Cached)
	}
	if page.ChartPoints != 1 {
		t.Errorf("cache chart has %d points after one frame with new tokens, want 1", page.ChartPoints)
	}
	consoletest.Screenshot(t, ctx, "live-update")
}

// TestPageAsksForKey: a 401 from /console/state shows the key panel; the key
// entered there opens the console, and travels only in the Authorization
// header.
func TestPageAsksForKey(t *testing.T) {
	const key = "sk-console-test-key"
	st := fixture(t)
	st.Tenant = "anonymous"
	srv, f := serve(t, key, st)
	ctx := consoletest.Browser(t)
	consoletest.Do(t, ctx, "open the console", chromedp.Navigate(srv.URL+"/console/"))

	page := consoletest.WaitFor(t, ctx, "the key-needed panel", func(p consoletest.Page) bool { return p.KeyNeeded })
	if page.Main || len(page.Workers) != 0 {
		t.Errorf("the console shows data without a key: %+v", page)
	}
	if !strings.Contains(page.KeyNeededText, "needs an API key") {
		t.Errorf("key panel says %q", page.KeyNeededText)
	}
	consoletest.Screenshot(t, ctx, "key-needed")

	consoletest.Do(t, ctx, "enter the key", chromedp.SendKeys(chromedp.CSS("#key-needed-input"), key))
	consoletest.Click(t, ctx, `#key-needed-form button[type="submit"]`)
	page = consoletest.WaitFor(t, ctx, "the console, live, with the key", func(p consoletest.Page) bool {
		return !p.KeyNeeded && len(p.Workers) == 4 && p.Live == "live"
	})
	if page.Tenant != "tenant anonymous" {
		t.Errorf("tenant label %q", page.Tenant)
	}
	for _, u := range f.requestURLs() {
		if strings.Contains(u, key) {
			t.Errorf("the key is in a URL: %s", u)
		}
	}

	// A reload keeps the key (sessionStorage): no second 401.
	f.mu.Lock()
	before := f.unauthed
	f.mu.Unlock()
	consoletest.Do(t, ctx, "reload", chromedp.Reload())
	consoletest.WaitFor(t, ctx, "the console after a reload", func(p consoletest.Page) bool {
		return len(p.Workers) == 4 && p.Live == "live"
	})
	f.mu.Lock()
	after := f.unauthed
	f.mu.Unlock()
	if after != before {
		t.Errorf("%d more 401s after a reload: the key was not kept", after-before)
	}
}

// TestPageReconnects: an events stream that fails shows "reconnecting" until
// a retry gets frames; a sub-agent whose parent is not listed is shown at the
// top level, marked.
func TestPageReconnects(t *testing.T) {
	st := fixture(t)
	st.Sessions = append(st.Sessions, console.Session{
		Tenant: "anonymous", SessionID: "agent-orphan", ParentSessionID: "sess-gone", Harness: "claude-code",
		FirstSeen: st.At, LastSeen: st.At,
	})
	srv, f := serve(t, "", st)
	release := make(chan struct{})
	f.mu.Lock()
	f.holdEvents = release
	f.mu.Unlock()
	ctx := consoletest.Browser(t)
	consoletest.Do(t, ctx, "open the console", chromedp.Navigate(srv.URL+"/console"))

	page := consoletest.WaitFor(t, ctx, "the state, reconnecting", func(p consoletest.Page) bool {
		return len(p.Workers) == 4 && p.Live == "reconnecting"
	})
	orphan, ok := page.Session("agent-orphan")
	if !ok || orphan.Depth != 0 || !orphan.Orphan || orphan.ParentID != "sess-gone" {
		t.Errorf("orphan row %+v (shown %v): want it at the top level, marked parent not listed", orphan, ok)
	}
	close(release)
	consoletest.WaitFor(t, ctx, "live after the retry", func(p consoletest.Page) bool { return p.Live == "live" })
}
