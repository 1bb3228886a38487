package frontend

import (
	"sync"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/chat"
	"switchyard.dev/services/servicekit/lru"
)

// sessionTable remembers, for the sessions this frontend has served
// (bounded, least recently used forgotten first), what each one's last
// request leaves to reuse: its decoded body and its prompt's preprocessing,
// for incremental decoding and preprocessing. It is this frontend's own and
// changes no answer: a session whose turns alternate between frontends
// misses here, which costs speed only. What the admin API shows of a
// session is the schedulers' (admin.go).
type sessionTable struct {
	mu  sync.Mutex
	lru *lru.Cache[sessionEntry]
}

type sessionEntry struct {
	prev     *chat.Session
	prevBody *chat.PrevBody
	bodyBuf  *bodyBuf // holds prevBody's bytes (reuseBody)
	sent     *sentPrompt
	chain    *routedChain
}

// heldBase is where a session's last prompt, or its block-hash chain, is
// held whole by a peer: holder kept it under key, and its first blocks
// blocks are those of the preprocessing of (the session's prev when that
// turn was prepared). A next turn prepared from the same prev repeats them
// up to its reused tokens, so it may name them as its base and send only
// what follows, to that holder and no other (another would not hold it; one
// that does not know bases is never sent one).
type heldBase[H comparable] struct {
	holder H
	key    uint64
	blocks int
	of     *chat.Session
}

// sentPrompt is a prompt the shim of worker holder kept
// (GenerateResult.prompt_kept); routedChain a chain the scheduler replica
// holder kept when it routed the turn (RouteResponse.chain_kept).
type (
	sentPrompt  = heldBase[string]
	routedChain = heldBase[schedulerv1.SchedulerServiceClient]
)

// baseFor is the base a turn prepared from from names, which repeats
// reusedBlocks leading blocks of that prompt: nil when h is of another
// prompt (or nil) or they share no block.
func (h *heldBase[H]) baseFor(from *chat.Session, reusedBlocks int) *heldBase[H] {
	if h == nil || from == nil || h.of != from {
		return nil
	}
	if blocks := min(reusedBlocks, h.blocks); blocks > 0 {
		return &heldBase[H]{holder: h.holder, key: h.key, blocks: blocks}
	}
	return nil
}

func newSessionTable(max int) *sessionTable {
	return &sessionTable{lru: lru.New[sessionEntry](max)}
}

// A session keeps, for its next request, what its last one leaves to
// reuse: the prompt's preprocessing and the decoded body (reuseBody), each
// in its slot of the entry.
func promptOf(e *sessionEntry) **chat.Session { return &e.prev }
func sentOf(e *sessionEntry) **sentPrompt     { return &e.sent }
func chainOf(e *sessionEntry) **routedChain   { return &e.chain }

// kept is what key's session keeps in slot, nil for a session not seen.
func kept[T any](t *sessionTable, key string, slot func(*sessionEntry) **T) *T {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.lru.Peek(key); e != nil {
		return *slot(e)
	}
	return nil
}

// reuse hands step what key's session keeps in slot (nil: no session, or
// a new one) and keeps what step leaves for the session's next request,
// unless step fails (so what is kept has passed step's checks) or this
// request is the session's final one, which leaves nothing. The table is
// not locked while step runs.
func reuse[T any](t *sessionTable, key string, final bool, slot func(*sessionEntry) **T, step func(prev *T) (next *T, err error)) error {
	return reuseWith(t, key, final, step,
		func(e *sessionEntry) *T { return *slot(e) },
		func(e *sessionEntry, next *T) { *slot(e) = next })
}

// reuseBody is reuse for the decoded body, whose bytes are in buf: while
// the table keeps a body for the session's next request it holds the body's
// buffer, and a request holds the kept body's buffer while step compares
// its own body with it (no request keeps a slice of another's body: the
// elements a decode reuses are decoded copies).
func reuseBody(t *sessionTable, key string, final bool, buf *bodyBuf, step func(prev *chat.PrevBody) (next *chat.PrevBody, err error)) error {
	var prevBuf *bodyBuf
	defer func() {
		if prevBuf != nil {
			prevBuf.release()
		}
	}()
	return reuseWith(t, key, final, step,
		func(e *sessionEntry) *chat.PrevBody {
			if prevBuf = e.bodyBuf; prevBuf != nil {
				prevBuf.hold()
			}
			return e.prevBody
		},
		func(e *sessionEntry, next *chat.PrevBody) {
			if e.bodyBuf != nil {
				e.bodyBuf.release()
			}
			e.prevBody, e.bodyBuf = next, nil
			if next != nil { // its bytes are buf's
				buf.hold()
				e.bodyBuf = buf
			}
		})
}

// reuseWith is reuse with what is kept taken from an entry (before step)
// and set in it (after) by take and set, under the table's lock.
func reuseWith[T any](t *sessionTable, key string, final bool, step func(prev *T) (next *T, err error),
	take func(*sessionEntry) *T, set func(*sessionEntry, *T)) error {
	if key == "" {
		_, err := step(nil)
		return err
	}
	var prev *T
	t.mu.Lock()
	if e := t.lru.Peek(key); e != nil {
		prev = take(e)
	}
	t.mu.Unlock()
	next, err := step(prev)
	if err != nil {
		return err
	}
	if final {
		next = nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	set(t.lru.Touch(key), next)
	return nil
}

// keep records, in slot, what key's session's last prompt (of) left at a
// peer, unless the session is gone (its final turn) or has moved on to
// another prompt.
func keep[T any](t *sessionTable, key string, slot func(*sessionEntry) **T, v *T, of *chat.Session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.lru.Peek(key); e != nil && e.prev == of {
		*slot(e) = v
	}
}
