package scheduler

import (
	"context"
	"sync"
	"time"

	"switchyard.dev/pkg/admission"
)

// predecessorWait bounds how long a turn waits for the FinishRequest of an
// earlier turn of its session that it extends (predecessors). The finish
// left the frontend before the client had the answer, so it is normally
// here within a millisecond; past the bound it was lost with its frontend,
// and the turn is routed as it would have been without waiting.
const predecessorWait = 100 * time.Millisecond

// predecessors are the turns routed here and not yet finished, by session,
// so that a session's next turn can wait for its previous turn's finish.
//
// A frontend sends FinishRequest as a notice (it does not wait for the
// answer before ending the client's answer), and the client may send the
// session's next turn through another frontend at once. That turn's Route
// then races the finish here, and one that overtakes it finds the previous
// turn's load still on its worker (under kv it may go elsewhere) and its
// program still reasoning. So a turn that extends an unfinished turn of its
// session, the whole of that turn's prompt and more, which only a client
// that has (or gave up on) that turn's answer can send, waits for that
// turn's finish first. Sibling turns with the same prompt (parallel samples,
// a hedged request) do not extend each other and do not wait.
type predecessors struct {
	wait time.Duration // predecessorWait; tests change it
	mu   sync.Mutex
	byID map[string]*unfinished
	// bySession lists each session's unfinished turns.
	bySession map[admission.Key][]*unfinished
}

// unfinished is one routed turn whose finish has not come.
type unfinished struct {
	id           string
	key          admission.Key
	promptTokens int
	// blocks is how many full blocks its prompt had, last the hash of the
	// last of them: a prompt holds this one's whole when its chain has
	// the same hash at the same place (the chain hashes its whole prefix).
	blocks int
	last   uint64
	done   chan struct{} // closed when its finish comes (or it is swept)
}

func newPredecessors() *predecessors {
	return &predecessors{wait: predecessorWait, byID: map[string]*unfinished{}, bySession: map[admission.Key][]*unfinished{}}
}

// routed records a turn just placed; a request placed again (migrated)
// replaces its earlier attempt.
func (p *predecessors) routed(id string, key admission.Key, promptTokens int, chain []uint64) {
	if key.SessionID == "" || len(chain) == 0 {
		return // nothing can be told to extend it
	}
	u := &unfinished{id: id, key: key, promptTokens: promptTokens, blocks: len(chain), last: chain[len(chain)-1], done: make(chan struct{})}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endLocked(id)
	p.byID[id] = u
	p.bySession[key] = append(p.bySession[key], u)
}

// finished records a turn's finish (or its load swept as lost): the turns
// waiting for it go on.
func (p *predecessors) finished(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endLocked(id)
}

func (p *predecessors) endLocked(id string) {
	u := p.byID[id]
	if u == nil {
		return
	}
	delete(p.byID, id)
	list := p.bySession[u.key]
	for i, v := range list {
		if v == u {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(p.bySession, u.key)
	} else {
		p.bySession[u.key] = list
	}
	close(u.done)
}

// extended returns the finish signals of the unfinished turns of key whose
// whole prompt a turn (id, promptTokens, chain) holds and extends.
func (p *predecessors) extended(id string, key admission.Key, promptTokens int, chain []uint64) []<-chan struct{} {
	if key.SessionID == "" {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []<-chan struct{}
	for _, u := range p.bySession[key] {
		if u.id != id && promptTokens > u.promptTokens && len(chain) >= u.blocks && chain[u.blocks-1] == u.last {
			out = append(out, u.done)
		}
	}
	return out
}

// await waits until every signal came, the wait bound passed or ctx
// ended; it reports whether all came.
func (p *predecessors) await(ctx context.Context, signals []<-chan struct{}) bool {
	if len(signals) == 0 {
		return true
	}
	timer := time.NewTimer(p.wait)
	defer timer.Stop()
	for _, c := range signals {
		select {
		case <-c:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
	return true
}
