package sessionindex

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"switchyard.dev/pkg/kv"
)

// model is a deliberately naive reference: maps of hashes, tips as sets,
// pruning by recomputing the closure, cycle detection by walking the
// tentative parent map. It shares no code with Index.
type model struct {
	max     int
	parent  map[kv.BlockHash]kv.BlockHash // known blocks → parent (0 = root)
	tips    map[string]map[string]map[kv.BlockHash]bool
	order   []string // most recent first
	parents map[string]string
}

func newModel(max int) *model {
	return &model{max: max, parent: map[kv.BlockHash]kv.BlockHash{}, tips: map[string]map[string]map[kv.BlockHash]bool{}, parents: map[string]string{}}
}

func (m *model) known(h kv.BlockHash) bool { _, ok := m.parent[h]; return ok }

func (m *model) ancestorOrSelf(a, b kv.BlockHash) bool {
	for i := 0; b != 0 && i < 1000; i++ {
		if a == b {
			return true
		}
		b = m.parent[b]
	}
	return false
}

func (m *model) touch(s string) {
	if i := slices.Index(m.order, s); i >= 0 {
		m.order = slices.Delete(m.order, i, i+1)
	}
	m.order = slices.Insert(m.order, 0, s)
	if m.tips[s] == nil {
		m.tips[s] = map[string]map[kv.BlockHash]bool{}
	}
}

func (m *model) capAndPrune() {
	for len(m.order) > m.max {
		old := m.order[len(m.order)-1]
		m.order = m.order[:len(m.order)-1]
		delete(m.tips, old)
		delete(m.parents, old)
	}
	keep := map[kv.BlockHash]bool{}
	for _, ws := range m.tips {
		for _, ts := range ws {
			for t := range ts {
				for b := t; b != 0 && !keep[b]; b = m.parent[b] {
					keep[b] = true
				}
			}
		}
	}
	for h := range m.parent {
		if !keep[h] {
			delete(m.parent, h)
		}
	}
}

func (m *model) addTip(s, w string, h kv.BlockHash) {
	ts := m.tips[s][w]
	if ts == nil {
		ts = map[kv.BlockHash]bool{}
		m.tips[s][w] = ts
	}
	for t := range ts {
		if m.ancestorOrSelf(h, t) {
			return
		}
	}
	for t := range ts {
		if m.ancestorOrSelf(t, h) {
			delete(ts, t)
		}
	}
	ts[h] = true
}

func (m *model) removeTip(s, w string, h kv.BlockHash) {
	delete(m.tips[s][w], h)
	if len(m.tips[s][w]) == 0 {
		delete(m.tips[s], w)
	}
}

func (m *model) stored(s, w string, p kv.BlockHash, blocks []kv.BlockHash) error {
	if s == "" || w == "" || len(blocks) == 0 || slices.Contains(blocks, 0) {
		return ErrInvalid
	}
	seen := map[kv.BlockHash]bool{}
	for _, b := range blocks {
		if seen[b] {
			return ErrCyclicParent
		}
		seen[b] = true
	}
	if p != 0 && seen[p] {
		return ErrCyclicParent
	}
	if p != 0 && !m.known(p) {
		switch {
		case !m.known(blocks[0]):
			return ErrUnknownParent
		case m.parent[blocks[0]] != 0:
			return ErrConflictingParent
		}
	}
	next := map[kv.BlockHash]kv.BlockHash{}
	for k, v := range m.parent {
		next[k] = v
	}
	if p != 0 && !m.known(p) {
		next[p] = 0
	}
	exp := p
	for _, b := range blocks {
		if m.known(b) {
			if par := m.parent[b]; par != 0 && par != exp {
				return ErrConflictingParent
			}
		}
		if !m.known(b) || m.parent[b] == 0 {
			next[b] = exp
		}
		exp = b
	}
	for _, b := range blocks {
		visited := map[kv.BlockHash]bool{}
		for c := b; c != 0; c = next[c] {
			if visited[c] {
				return ErrCyclicParent
			}
			visited[c] = true
		}
	}
	m.parent = next
	m.touch(s)
	m.addTip(s, w, blocks[len(blocks)-1])
	m.capAndPrune()
	return nil
}

func (m *model) match(s, w string, h kv.BlockHash) bool {
	if s == "" || w == "" || h == 0 || !m.known(h) {
		return false
	}
	m.touch(s)
	m.addTip(s, w, h)
	m.capAndPrune()
	return true
}

func (m *model) remove(w string, blocks []kv.BlockHash) {
	gone := map[kv.BlockHash]bool{}
	for _, b := range blocks {
		gone[b] = true
	}
	for _, b := range blocks {
		if !m.known(b) {
			continue
		}
		target := m.parent[b]
		for target != 0 && gone[target] {
			target = m.parent[target]
		}
		var ss []string
		for s, ws := range m.tips {
			if ws[w][b] {
				ss = append(ss, s)
			}
		}
		sort.Strings(ss)
		for _, s := range ss {
			m.removeTip(s, w, b)
			if target != 0 {
				m.addTip(s, w, target)
			}
		}
		m.capAndPrune()
	}
}

func (m *model) clear(w string) {
	for s := range m.tips {
		delete(m.tips[s], w)
	}
	m.capAndPrune()
}

func (m *model) setParent(s, p string) {
	if s == "" || s == p {
		return
	}
	m.touch(s)
	m.parents[s] = p
	m.capAndPrune()
}

func (m *model) lineage(s string) []Chain {
	var out []Chain
	var ws []string
	for w := range m.tips[s] {
		ws = append(ws, w)
	}
	sort.Strings(ws)
	for _, w := range ws {
		var ts []kv.BlockHash
		for t := range m.tips[s][w] {
			ts = append(ts, t)
		}
		slices.Sort(ts)
		for _, t := range ts {
			var path []kv.BlockHash
			for b := t; b != 0; b = m.parent[b] {
				path = append(path, b)
			}
			slices.Reverse(path)
			// Shared: leading blocks that another tip (any session and
			// worker, this chain's excepted) also descends from.
			shared := 0
			for i, b := range path {
				for s2, ws2 := range m.tips {
					for w2, ts2 := range ws2 {
						for t2 := range ts2 {
							if (s2 != s || w2 != w || t2 != t) && m.ancestorOrSelf(b, t2) {
								shared = i + 1
							}
						}
					}
				}
			}
			out = append(out, Chain{Worker: w, Blocks: path, Shared: shared})
		}
	}
	return out
}

// op is one step of a generated update sequence.
type op struct {
	kind    int // 0 stored, 1 match, 2 remove, 3 clear, 4 parent
	session string
	worker  string
	parent  kv.BlockHash
	blocks  []kv.BlockHash
}

func (o op) String() string {
	return fmt.Sprintf("{%d %s %s p=%d %v}", o.kind, o.session, o.worker, o.parent, o.blocks)
}

// decodeOps turns bytes into a sequence of ops over a small universe of
// sessions, workers and hashes, so collisions, conflicts and cycles are
// frequent.
func decodeOps(data []byte) []op {
	var ops []op
	next := func() (byte, bool) {
		if len(data) == 0 {
			return 0, false
		}
		b := data[0]
		data = data[1:]
		return b, true
	}
	for {
		b, ok := next()
		if !ok {
			return ops
		}
		o := op{kind: int(b % 8), session: fmt.Sprintf("s%d", (b/8)%5), worker: fmt.Sprintf("w%d", (b/40)%3)}
		if o.kind > 4 {
			o.kind = 0 // stored is the common case
		}
		if b2, ok := next(); ok {
			o.parent = kv.BlockHash(b2 % 14)
			if b2 >= 128 {
				o.parent = 0
			}
		}
		n, _ := next()
		for i := 0; i < int(n%5)+1; i++ {
			h, ok := next()
			if !ok {
				break
			}
			o.blocks = append(o.blocks, kv.BlockHash(h%14)+1)
		}
		ops = append(ops, o)
	}
}

// runDifferential applies ops to an Index and to the model and fails at the
// first difference in outcome, lineage, node count or session order.
func runDifferential(t *testing.T, ops []op, maxSessions int) {
	t.Helper()
	x := New(Config{MaxSessions: maxSessions})
	m := newModel(maxSessions)
	now := time.Unix(1000, 0)
	for i, o := range ops {
		now = now.Add(time.Second)
		switch o.kind {
		case 0:
			got := x.UpdateFromStored(o.session, o.worker, o.parent, o.blocks, now)
			want := m.stored(o.session, o.worker, o.parent, o.blocks)
			if !errors.Is(got, want) || (got == nil) != (want == nil) {
				t.Fatalf("op %d %v: error %v, model %v", i, o, got, want)
			}
		case 1:
			h := kv.BlockHash(0)
			if len(o.blocks) > 0 {
				h = o.blocks[0]
			}
			if got, want := x.UpdateFromMatch(o.session, o.worker, h, now), m.match(o.session, o.worker, h); got != want {
				t.Fatalf("op %d %v: match %v, model %v", i, o, got, want)
			}
		case 2:
			x.Remove(o.worker, o.blocks)
			m.remove(o.worker, o.blocks)
		case 3:
			x.ClearWorker(o.worker)
			m.clear(o.worker)
		case 4:
			x.SetParent(o.session, "p"+o.worker, now)
			m.setParent(o.session, "p"+o.worker)
		}
		checkInvariants(t, x)
		var ids []string
		for _, s := range x.Sessions(0) {
			ids = append(ids, s.ID)
		}
		if diff := cmp.Diff(m.order, ids); diff != "" {
			t.Fatalf("op %d %v: session order (-model +index):\n%s", i, o, diff)
		}
		for _, s := range m.order {
			if diff := cmp.Diff(m.lineage(s), x.Lineage(s, "")); diff != "" {
				t.Fatalf("op %d %v: lineage of %s (-model +index):\n%s", i, o, s, diff)
			}
		}
		if got, want := x.Stats().Nodes, len(m.parent); got != want {
			t.Fatalf("op %d %v: %d nodes, model %d", i, o, got, want)
		}
	}
}

// checkInvariants recomputes every derived count of the dense storage.
func checkInvariants(t *testing.T, x *Index) {
	t.Helper()
	children := map[nodeID]uint32{}
	refs := map[nodeID]uint32{}
	used := 0
	for id := 1; id < len(x.nodes); id++ {
		n := x.nodes[id]
		if !n.used {
			continue
		}
		used++
		if x.byHash[n.hash] != nodeID(id) {
			t.Fatalf("node %d hash %d not indexed", id, n.hash)
		}
		if n.parent != 0 {
			if !x.nodes[n.parent].used {
				t.Fatalf("node %d has freed parent %d", id, n.parent)
			}
			children[n.parent]++
		}
	}
	if used != len(x.byHash) || used+len(x.free) != len(x.nodes)-1 {
		t.Fatalf("used %d, byHash %d, free %d, slots %d", used, len(x.byHash), len(x.free), len(x.nodes)-1)
	}
	for _, s := range x.sessions {
		for w, fs := range s.frontiers {
			for _, f := range fs {
				refs[f]++
				if _, ok := x.workers[w][f][s.id]; !ok {
					t.Fatalf("frontier %d of %s on %s missing from reverse map", f, s.id, w)
				}
			}
		}
	}
	for id := 1; id < len(x.nodes); id++ {
		n := x.nodes[id]
		if !n.used {
			continue
		}
		if n.children != children[nodeID(id)] || n.refs != refs[nodeID(id)] {
			t.Fatalf("node %d: children %d/%d refs %d/%d", id, n.children, children[nodeID(id)], n.refs, refs[nodeID(id)])
		}
		if n.children == 0 && n.refs == 0 {
			t.Fatalf("node %d is unreferenced but not pruned", id)
		}
	}
	total := 0
	for _, r := range refs {
		total += int(r)
	}
	if st := x.Stats(); st.Frontiers != total {
		t.Fatalf("stats count %d frontiers, there are %d", st.Frontiers, total)
	}
	if x.lru.Len() != len(x.sessions) {
		t.Fatalf("lru %d, sessions %d", x.lru.Len(), len(x.sessions))
	}
}
