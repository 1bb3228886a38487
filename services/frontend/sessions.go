package frontend

import (
	"container/list"
	"sort"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "switchyard.dev/gen/switchyard/agent/v1"
	frontendv1 "switchyard.dev/gen/switchyard/frontend/v1"
	"switchyard.dev/pkg/chat"
)

// sessionTable remembers the sessions this frontend has seen, bounded, least
// recently used evicted first: their counters for the admin API, and their
// previous body and turn for incremental decoding and preprocessing.
type sessionTable struct {
	mu    sync.Mutex
	max   int
	byKey map[string]*list.Element
	lru   *list.List // front = most recent; values are *sessionEntry
}

type sessionEntry struct {
	key        string
	agent      *agentv1.AgentContext
	turns      uint32
	lastWorker string
	prompt     uint64
	completion uint64
	cached     uint64
	firstSeen  int64
	lastSeen   int64
	prev       *chat.Session
	prevBody   *chat.PrevBody
}

func newSessionTable(max int) *sessionTable {
	return &sessionTable{max: max, byKey: map[string]*list.Element{}, lru: list.New()}
}

// get returns the entry for key, creating it; the caller holds mu.
func (t *sessionTable) get(key string) *sessionEntry {
	if el, ok := t.byKey[key]; ok {
		t.lru.MoveToFront(el)
		return el.Value.(*sessionEntry)
	}
	e := &sessionEntry{key: key}
	t.byKey[key] = t.lru.PushFront(e)
	for t.lru.Len() > t.max {
		old := t.lru.Back()
		t.lru.Remove(old)
		delete(t.byKey, old.Value.(*sessionEntry).key)
	}
	return e
}

// A session keeps, for its next request, what its last one leaves to
// reuse: the prompt's preprocessing and the decoded body, each in its slot
// of the entry.
func promptOf(e *sessionEntry) **chat.Session { return &e.prev }
func bodyOf(e *sessionEntry) **chat.PrevBody  { return &e.prevBody }

// kept is what key's session keeps in slot, nil for a session not seen.
func kept[T any](t *sessionTable, key string, slot func(*sessionEntry) **T) *T {
	t.mu.Lock()
	defer t.mu.Unlock()
	if el, ok := t.byKey[key]; ok {
		return *slot(el.Value.(*sessionEntry))
	}
	return nil
}

// reuse hands step what key's session keeps in slot (nil: no session, or
// a new one) and keeps what step leaves for the session's next request,
// unless step fails (so what is kept has passed step's checks) or this
// request is the session's final one, which leaves nothing. The table is
// not locked while step runs.
func reuse[T any](t *sessionTable, key string, final bool, slot func(*sessionEntry) **T, step func(prev *T) (next *T, err error)) error {
	if key == "" {
		_, err := step(nil)
		return err
	}
	next, err := step(kept(t, key, slot))
	if err != nil {
		return err
	}
	if final {
		next = nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	*slot(t.get(key)) = next
	return nil
}

// record counts a finished (or failed) turn.
func (t *sessionTable) record(tr *turnRequest, res *turnResult, now int64) {
	key := sessionKey(tr.tenant, tr.agent.SessionID)
	if key == "" || res == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.get(key)
	if e.firstSeen == 0 {
		e.firstSeen = now
	}
	e.lastSeen = now
	e.agent = &agentv1.AgentContext{
		SessionId: tr.agent.SessionID, ParentSessionId: tr.agent.ParentSessionID,
		SessionFinal: tr.agent.Final(), Tenant: tr.tenant, Harness: string(tr.agent.Harness),
		Compaction: tr.agent.Compaction != nil,
	}
	e.turns++
	e.lastWorker = res.workerID
	e.prompt += uint64(res.promptTokens)
	e.completion += uint64(res.completion)
	e.cached += uint64(res.cached)
}

func (e *sessionEntry) proto() *frontendv1.Session {
	return &frontendv1.Session{
		Agent: e.agent, Turns: e.turns, LastWorkerId: e.lastWorker,
		PromptTokens: e.prompt, CompletionTokens: e.completion, CachedTokens: e.cached,
		FirstSeen: timestamppb.New(time.Unix(e.firstSeen, 0)), LastSeen: timestamppb.New(time.Unix(e.lastSeen, 0)),
	}
}

// list returns up to limit sessions of tenant ("" = all), most recent first.
func (t *sessionTable) list(tenant string, limit int) []*frontendv1.Session {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*frontendv1.Session
	for el := t.lru.Front(); el != nil && len(out) < limit; el = el.Next() {
		e := el.Value.(*sessionEntry)
		if e.agent == nil || (tenant != "" && e.agent.Tenant != tenant) {
			continue
		}
		out = append(out, e.proto())
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].LastSeen.AsTime().After(out[j].LastSeen.AsTime()) })
	return out
}

func (t *sessionTable) lookup(key string) *frontendv1.Session {
	t.mu.Lock()
	defer t.mu.Unlock()
	el, ok := t.byKey[key]
	if !ok || el.Value.(*sessionEntry).agent == nil {
		return nil
	}
	return el.Value.(*sessionEntry).proto()
}
