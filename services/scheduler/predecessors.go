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
// here within a millisecond; past the bound it is taken as lost (no later
// turn waits for it again), and the turn is routed as it would have been
// without waiting.
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
// session waits for that turn's finish first. Extends: its chain has the
// other's last full block at the same place, and it has more tokens. What
// the chain cannot see, the tokens after the last full block, is not
// compared: a concurrent sibling that repeats a running turn's full blocks
// and is longer waits too, for the bound, once (the running turn is then
// taken as lost). Siblings with the same prompt (parallel samples, a hedged
// request) do not extend each other and do not wait.
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
	// last of them: a prompt holds this one's full blocks when its chain
	// has the same hash at the same place (the chain hashes its whole
	// prefix).
	blocks int
	last   uint64
	// lost: a turn waited for its finish in vain; none waits again.
	lost bool
	done chan struct{} // closed when its finish comes (or it is taken as lost)
}

func newPredecessors() *predecessors {
	return &predecessors{wait: predecessorWait, byID: map[string]*unfinished{}, bySession: map[admission.Key][]*unfinished{}}
}

// routed records a turn just placed; a request placed again (migrated)
// replaces its earlier attempt.
func (p *predecessors) routed(id string, key admission.Key, promptTokens int, chain []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endLocked(id)
	if key.SessionID == "" || len(chain) == 0 {
		return // nothing can be told to extend it
	}
	u := &unfinished{id: id, key: key, promptTokens: promptTokens, blocks: len(chain), last: chain[len(chain)-1], done: make(chan struct{})}
	p.byID[id] = u
	p.bySession[key] = append(p.bySession[key], u)
}

// finished records a turn's finish (or that its placing again failed):
// the turns waiting for it go on.
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

// extended returns the unfinished turns of key, not taken as lost, whose
// prompt a turn (id, promptTokens, chain) extends.
func (p *predecessors) extended(id string, key admission.Key, promptTokens int, chain []uint64) []*unfinished {
	if key.SessionID == "" {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*unfinished
	for _, u := range p.bySession[key] {
		if u.id != id && !u.lost && promptTokens > u.promptTokens && len(chain) >= u.blocks && chain[u.blocks-1] == u.last {
			out = append(out, u)
		}
	}
	return out
}

// await waits until every one of turns finished; it reports whether they
// did. Past the wait bound it gives up and takes the turns not finished as
// lost; it also gives up, taking nothing as lost, when ctx ends or stop
// closes (the scheduler is shutting down).
func (p *predecessors) await(ctx context.Context, stop <-chan struct{}, turns []*unfinished) bool {
	timer := time.NewTimer(p.wait)
	defer timer.Stop()
	for _, u := range turns {
		select {
		case <-u.done:
		case <-timer.C:
			p.mu.Lock()
			for _, v := range turns {
				v.lost = true // harmless on one finished meanwhile: it is no longer listed
			}
			p.mu.Unlock()
			return false
		case <-ctx.Done():
			return false
		case <-stop:
			return false
		}
	}
	return true
}
