// Package consoletest drives the operator console in headless Chromium for
// tests: the console's own page test and the mesh's end-to-end test share
// the browser's flags, the skip rule, the reading of the page and the
// screenshots. It is imported only by _test.go files.
package consoletest

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Patience bounds every wait on the page, the browser's start included:
// far beyond what any should take on a loaded machine.
const Patience = 30 * time.Second

// DefaultChromium is where Debian's chromium package puts the browser.
const DefaultChromium = "/usr/bin/chromium"

// Chromium returns the browser's path ($CHROMIUM, else /usr/bin/chromium).
// Without one it skips the test, unless SWITCHYARD_BROWSER_TEST=1 says the
// browser tests must run (CI): then it fails it. A test that starts
// something costly before its browser calls it first.
func Chromium(t testing.TB) string {
	t.Helper()
	path := os.Getenv("CHROMIUM")
	if path == "" {
		path = DefaultChromium
	}
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("SWITCHYARD_BROWSER_TEST") == "1" {
			t.Fatalf("SWITCHYARD_BROWSER_TEST=1 but no browser: %v (install Debian's chromium, or set $CHROMIUM)", err)
		}
		t.Skipf("no browser at %s (install Debian's chromium or set $CHROMIUM; SWITCHYARD_BROWSER_TEST=1 makes this a failure)", path)
	}
	return path
}

// Browser starts headless Chromium for one test and returns its context (a
// tab), which closes when the test ends; without a browser it skips or
// fails the test as Chromium does.
func Browser(t testing.TB) context.Context {
	t.Helper()
	path := Chromium(t)

	// Not t.TempDir: Chromium's children may still write there for a
	// moment after it exits, and a failed removal would fail the test.
	dir, err := os.MkdirTemp("", "switchyard-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for range 50 {
			if os.RemoveAll(dir) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	// The flags that work on the project's machines: without the
	// background-networking ones Chromium keeps trying Google's hosts,
	// which the closed network refuses.
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(dir),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("lang", "en-US"), // thousands separators as the tests expect
		chromedp.WindowSize(1360, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc) // stops the browser and waits for it

	// chromedp logs from its own goroutines, possibly after the test ends.
	var mu sync.Mutex
	done := false
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			t.Logf("chromedp: "+format, args...)
		}
	}
	t.Cleanup(func() { mu.Lock(); done = true; mu.Unlock() })

	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithErrorf(logf))
	t.Cleanup(cancel)
	// The first Do starts the browser and binds its life to the context it
	// is given, so it gets ctx itself; a start that hangs is cut off by
	// cancelling ctx.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	timer := time.NewTimer(Patience)
	defer timer.Stop()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("start %s: %v", path, err)
		}
	case <-timer.C:
		cancel()
		<-started
		t.Fatalf("start %s: no browser after %v", path, Patience)
	}
	return ctx
}

//go:embed snapshot.js
var snapshotJS string

// Page is what the console shows, read from its DOM (snapshot.js).
type Page struct {
	Title         string    `json:"title"`
	Live          string    `json:"live"` // the live indicator's data-state: connecting, live, reconnecting, stopped
	LiveText      string    `json:"liveText"`
	KeyNeeded     bool      `json:"keyNeeded"` // the "needs an API key" panel is shown
	KeyNeededText string    `json:"keyNeededText"`
	Main          bool      `json:"main"` // the fleet, cache and sessions are shown
	Tenant        string    `json:"tenant"`
	Banner        string    `json:"banner"`
	Workers       []Worker  `json:"workers"`
	Sessions      []Session `json:"sessions"`
	Turns         []Turn    `json:"turns"` // of the expanded sessions, in page order
	ChartPoints   int       `json:"chartPoints"`
	HitRate       string    `json:"hitRate"`
	Admissions    int       `json:"admissions"` // admission decisions shown (of the expanded sessions)
	HintsSent     string    `json:"hintsSent"`  // data-value of the hints' sent count; "" without hints
	HintRows      int       `json:"hintRows"`   // recent hints listed
}

// Worker is one worker card.
type Worker struct {
	ID    string   `json:"id"`
	Lease string   `json:"lease"` // healthy, expiring, expired
	Tiers []string `json:"tiers"` // "device: 120 / 4,096", as shown
}

// Session is one row of the sessions tree, in page order.
type Session struct {
	ID          string `json:"id"`
	ParentID    string `json:"parentId"`
	Tenant      string `json:"tenant"`
	Depth       int    `json:"depth"` // 0 at the top level, 1 for a sub-agent, …
	Turns       int    `json:"turns"`
	Orphan      bool   `json:"orphan"` // has a parent that is not listed
	Paused      bool   `json:"paused"`
	PauseReason string `json:"pauseReason"`
	Expanded    bool   `json:"expanded"`
	Perfetto    string `json:"perfetto"` // the trace link's href
}

// Turn is one row of a session's recent turns.
type Turn struct {
	RequestID  string `json:"requestId"`
	SessionID  string `json:"sessionId"`
	Cached     int    `json:"cached"`     // data-value of the turn-cached cell; -1 when unknown
	CachedText string `json:"cachedText"` // as displayed, with thousands separators
}

// Session returns the row of session id, if shown.
func (p Page) Session(id string) (Session, bool) {
	for _, s := range p.Sessions {
		if s.ID == id {
			return s, true
		}
	}
	return Session{}, false
}

// Turn returns the row of the turn with request id, if shown.
func (p Page) Turn(requestID string) (Turn, bool) {
	for _, tr := range p.Turns {
		if tr.RequestID == requestID {
			return tr, true
		}
	}
	return Turn{}, false
}

// WorkerIDs lists the worker cards' ids in page order.
func (p Page) WorkerIDs() []string {
	ids := make([]string, len(p.Workers))
	for i, w := range p.Workers {
		ids[i] = w.ID
	}
	return ids
}

// Read reads the page once.
func Read(ctx context.Context) (Page, error) {
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](snapshotJS))
	if err != nil {
		return Page{}, fmt.Errorf("read the console: %w", err)
	}
	var p Page
	if err := json.Unmarshal(raw, &p); err != nil {
		return Page{}, fmt.Errorf("decode the console's snapshot %s: %w", raw, err)
	}
	return p, nil
}

// WaitFor reads the page until cond holds and returns what it read, failing
// the test (with what, and the page as last read) after Patience.
func WaitFor(t testing.TB, ctx context.Context, what string, cond func(Page) bool) Page {
	t.Helper()
	deadline := time.Now().Add(Patience)
	var last Page
	var lastErr error
	for {
		p, err := Read(ctx)
		if err == nil {
			last, lastErr = p, nil
			if cond(p) {
				return p
			}
		} else {
			lastErr = err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			out, _ := json.MarshalIndent(last, "", "  ")
			t.Fatalf("gave up after %v waiting for the console to show %s (last error: %v); it showed:\n%s", Patience, what, lastErr, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Do runs actions on the page, failing the test on an error.
func Do(t testing.TB, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	run, cancel := context.WithTimeout(ctx, Patience)
	defer cancel()
	if err := chromedp.Do(run, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Click clicks the first element that matches the CSS selector sel, in one
// step in the page: the console redraws rows as frames arrive, and a click
// through the protocol could land on a row that was just replaced.
func Click(t testing.TB, ctx context.Context, sel string) {
	t.Helper()
	run, cancel := context.WithTimeout(ctx, Patience)
	defer cancel()
	js, err := json.Marshal(sel)
	if err != nil {
		t.Fatal(err)
	}
	found, err := chromedp.Run(run, chromedp.Evaluate[bool](fmt.Sprintf(
		`(() => { const el = document.querySelector(%s); if (el) el.click(); return Boolean(el); })()`, js)))
	if err != nil {
		t.Fatalf("click %s: %v", sel, err)
	}
	if !found {
		t.Fatalf("click %s: no such element", sel)
	}
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// Screenshot saves a full-page PNG of the page as
// $CONSOLE_SCREENSHOTS/<test>-<name>.png when that variable is set.
func Screenshot(t testing.TB, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("CONSOLE_SCREENSHOTS")
	if dir == "" {
		return
	}
	run, cancel := context.WithTimeout(ctx, Patience)
	defer cancel()
	png, err := chromedp.Run(run, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, unsafeName.ReplaceAllString(t.Name()+"-"+name, "_")+".png")
	if err := os.WriteFile(file, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", file)
}
