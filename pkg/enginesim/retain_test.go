package enginesim

import (
	"errors"
	"testing"
	"time"
)

// run adds one request and steps the engine until it has no work, returning
// the cached tokens its first output reported.
func runOne(t *testing.T, e *Engine, r Request) int {
	t.Helper()
	if err := e.Add(r); err != nil {
		t.Fatal(err)
	}
	cached := -1
	for e.HasWork() {
		for _, o := range e.Step().Outputs {
			if o.RequestID == r.ID && o.First {
				cached = o.CachedTokens
			}
		}
		if err := e.checkInvariants(); err != nil {
			t.Fatal(err)
		}
	}
	return cached
}

// A retained request's blocks outlive unretained ones under pressure: the
// eviction takes every unretained cached block first, then the retained in
// their own least-recently-used order. Without the retention (the control)
// the same pressure evicts the older request, as plain LRU does.
func TestRetainedBlocksAreEvictedLast(t *testing.T) {
	for _, retain := range []time.Duration{0, time.Hour} {
		e := mustNew(t, Config{BlockSize: 4, NumGPUBlocks: 12, MaxNumBatchedTokens: 64})
		a := Request{ID: "a", Prompt: seq(0, 16), MaxTokens: 1, Retain: retain}
		b := Request{ID: "b", Prompt: seq(100, 16), MaxTokens: 1}
		runOne(t, e, a)
		runOne(t, e, b) // b is the more recently used
		// 8 new blocks: the 4 empty ones and 4 cached ones.
		runOne(t, e, Request{ID: "pressure", Prompt: seq(200, 32), MaxTokens: 1})
		gotA := runOne(t, e, Request{ID: "a2", Prompt: seq(0, 16), MaxTokens: 1})
		if retain > 0 && gotA != 12 {
			t.Errorf("retained: a's prompt again has %d cached tokens, want 12 (its blocks kept)", gotA)
		}
		if retain == 0 && gotA != 0 {
			t.Errorf("unretained: a's prompt again has %d cached tokens, want 0 (LRU took the older)", gotA)
		}
	}
}

// A retention runs out: past it, the blocks are evicted like any other
// (before more recently used unretained ones).
func TestRetentionExpires(t *testing.T) {
	e := mustNew(t, Config{BlockSize: 4, NumGPUBlocks: 12, MaxNumBatchedTokens: 64})
	runOne(t, e, Request{ID: "a", Prompt: seq(0, 16), MaxTokens: 1, Retain: time.Millisecond})
	until := e.clock + time.Millisecond
	runOne(t, e, Request{ID: "b", Prompt: seq(100, 16), MaxTokens: 1})
	for e.clock <= until { // keep the engine busy past a's retention
		runOne(t, e, Request{ID: "b", Prompt: seq(100, 16), MaxTokens: 1})
	}
	runOne(t, e, Request{ID: "pressure", Prompt: seq(200, 32), MaxTokens: 1})
	if got := runOne(t, e, Request{ID: "a2", Prompt: seq(0, 16), MaxTokens: 1}); got != 0 {
		t.Errorf("a's prompt again has %d cached tokens after its retention ran out, want 0", got)
	}
}

// A retention that ran out leaves the block its last use: blocks idle for
// longer, retained or not, are evicted before it (an expired retention must
// not jump ahead of them, as it once did: at low load that evicted the
// sessions' most recent prefixes first).
func TestExpiredRetentionKeepsItsLastUse(t *testing.T) {
	e := mustNew(t, Config{BlockSize: 4, NumGPUBlocks: 12, MaxNumBatchedTokens: 64})
	runOne(t, e, Request{ID: "c", Prompt: seq(100, 16), MaxTokens: 1}) // idle the longest
	runOne(t, e, Request{ID: "a", Prompt: seq(0, 16), MaxTokens: 1, Retain: time.Millisecond})
	until := e.clock + time.Millisecond
	for e.clock <= until { // keep the engine busy past a's retention, on one block of its own
		runOne(t, e, Request{ID: "tick", Prompt: seq(300, 4), MaxTokens: 1})
	}
	runOne(t, e, Request{ID: "pressure", Prompt: seq(200, 24), MaxTokens: 1})
	if got := runOne(t, e, Request{ID: "a2", Prompt: seq(0, 16), MaxTokens: 1}); got != 12 {
		t.Errorf("a's prompt again has %d cached tokens, want 12: the older c goes first", got)
	}
	if got := runOne(t, e, Request{ID: "c2", Prompt: seq(100, 16), MaxTokens: 1}); got != 0 {
		t.Errorf("c's prompt again has %d cached tokens, want 0 (evicted as the least recently used)", got)
	}
}

func TestNegativeRetentionIsInvalid(t *testing.T) {
	e := mustNew(t, Config{BlockSize: 4, NumGPUBlocks: 12})
	if err := e.Add(Request{ID: "a", Prompt: seq(0, 8), Retain: -time.Second}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("Add with a negative retention: %v, want ErrInvalidRequest", err)
	}
}
