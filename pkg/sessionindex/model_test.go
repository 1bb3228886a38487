package sessionindex

import (
	"fmt"
	"math/rand/v2"
	"reflect"
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
	bad := func(kind error, h kv.BlockHash) error {
		return &UpdateError{Kind: kind, Session: s, Block: h}
	}
	seen := map[kv.BlockHash]bool{}
	for _, b := range blocks {
		if seen[b] {
			return bad(ErrCyclicParent, b)
		}
		seen[b] = true
	}
	if p != 0 && seen[p] {
		return bad(ErrCyclicParent, p)
	}
	if p != 0 && !m.known(p) {
		switch {
		case !m.known(blocks[0]):
			return bad(ErrUnknownParent, p)
		case m.parent[blocks[0]] != 0:
			return bad(ErrConflictingParent, blocks[0])
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
				return bad(ErrConflictingParent, b)
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
				// Every block's new root path runs through p, so p is on
				// the cycle: the offending block is the first of the
				// update's blocks met going up from p.
				for c := p; ; c = next[c] {
					if seen[c] {
						return bad(ErrCyclicParent, c)
					}
				}
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
			reached := map[kv.BlockHash]bool{}
			for s2, ws2 := range m.tips {
				for w2, ts2 := range ws2 {
					for t2 := range ts2 {
						if s2 != s || w2 != w || t2 != t {
							for b := t2; b != 0 && !reached[b]; b = m.parent[b] {
								reached[b] = true
							}
						}
					}
				}
			}
			shared := 0
			for i, b := range path {
				if reached[b] {
					shared = i + 1
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

// apply runs o on the model; the result is the error of a stored op or
// whether a match was recorded.
func (m *model) apply(o op) any {
	switch o.kind {
	case 0:
		return m.stored(o.session, o.worker, o.parent, o.blocks)
	case 1:
		return m.match(o.session, o.worker, o.matched())
	case 2:
		m.remove(o.worker, o.blocks)
	case 3:
		m.clear(o.worker)
	case 4:
		m.setParent(o.session, "p"+o.worker)
	}
	return nil
}

// matched is the block a match op names.
func (o op) matched() kv.BlockHash {
	if len(o.blocks) == 0 {
		return 0
	}
	return o.blocks[0]
}

// genOps draws n ops aimed at the cases that random bytes rarely reach. It
// runs them on a model of its own as it goes, so it knows which blocks are
// roots, tips and inner nodes: extensions of a tip several blocks deep,
// branches and matches below or above existing frontiers, grafts of known
// roots, reconnects under an unknown parent, cycles through a graft,
// conflicting claims, removals and clears. Fresh hashes come round again
// once the universe is used up, so pruned blocks are reused too.
func genOps(r *rand.Rand, n, maxSessions int) []op {
	m := newModel(maxSessions)
	const universe = 48
	last := kv.BlockHash(0)
	fresh := func() kv.BlockHash {
		last = last%universe + 1
		return last
	}
	freshN := func(k int) []kv.BlockHash {
		var bs []kv.BlockHash
		for range k {
			bs = append(bs, fresh())
		}
		return bs
	}
	pick := func(hs []kv.BlockHash) kv.BlockHash {
		if len(hs) == 0 {
			return fresh()
		}
		return hs[r.IntN(len(hs))]
	}
	var ops []op
	for len(ops) < n {
		var known, roots, tips []kv.BlockHash
		for h, p := range m.parent {
			known = append(known, h)
			if p == 0 {
				roots = append(roots, h)
			}
		}
		slices.Sort(known)
		slices.Sort(roots)
		o := op{session: fmt.Sprintf("s%d", r.IntN(3)), worker: fmt.Sprintf("w%d", r.IntN(2))}
		for h := range m.tips[o.session][o.worker] {
			tips = append(tips, h)
		}
		slices.Sort(tips)
		switch r.IntN(14) {
		case 0, 1, 2: // the next turn extends a tip of the session
			o.parent = pick(tips)
			o.blocks = freshN(1 + r.IntN(4))
		case 3: // a new root chain
			o.blocks = freshN(1 + r.IntN(4))
		case 4: // a branch (or a sub-agent) off any known block
			o.parent = pick(known)
			o.blocks = freshN(1 + r.IntN(3))
		case 5: // restate a known block's path and go on from there
			b := pick(known)
			var path []kv.BlockHash
			for c := b; c != 0; c = m.parent[c] {
				path = append(path, c)
			}
			slices.Reverse(path)
			i := r.IntN(len(path))
			if i > 0 {
				o.parent = path[i-1]
			}
			o.blocks = append(path[i:], freshN(r.IntN(3))...)
		case 6: // graft a known root under a known block, maybe via new ones
			o.parent = pick(known)
			o.blocks = append(freshN(r.IntN(2)), pick(roots))
			o.blocks = append(o.blocks, freshN(r.IntN(2))...)
		case 7: // reconnect a known root under an unknown parent
			o.parent = fresh()
			o.blocks = append([]kv.BlockHash{pick(roots)}, freshN(r.IntN(3))...)
		case 8: // a cycle: graft the root of a known block under that block
			b := pick(known)
			rt := b
			for m.parent[rt] != 0 {
				rt = m.parent[rt]
			}
			o.parent = b
			o.blocks = append(freshN(r.IntN(2)), rt)
			if r.IntN(2) == 0 {
				// ...and restate the path below the root as well
				var below []kv.BlockHash
				for c := m.parent[b]; c != 0 && c != rt; c = m.parent[c] {
					below = append(below, c)
				}
				slices.Reverse(below)
				o.blocks = append(o.blocks, below...)
			}
		case 9: // anything: known and fresh blocks under any parent
			switch r.IntN(3) {
			case 0:
				o.parent = pick(known)
			case 1:
				o.parent = fresh()
			}
			for range 1 + r.IntN(4) {
				if r.IntN(2) == 0 {
					o.blocks = append(o.blocks, pick(known))
				} else {
					o.blocks = append(o.blocks, fresh())
				}
			}
		case 10: // a route-time hit, often on an ancestor of a tip
			o.kind = 1
			o.blocks = []kv.BlockHash{pick(known)}
		case 11: // blocks leave the worker
			o.kind = 2
			for range 1 + r.IntN(3) {
				o.blocks = append(o.blocks, pick(known))
			}
		case 12:
			o.kind = 3
		case 13:
			o.kind = 4
		}
		m.apply(o)
		ops = append(ops, o)
	}
	return ops
}

// runDifferential applies ops to an Index and to the model and fails at the
// first difference in outcome (errors down to their Kind and Block),
// lineage, node count or session order.
func runDifferential(t *testing.T, ops []op, maxSessions int) {
	t.Helper()
	x := New(Config{MaxSessions: maxSessions})
	m := newModel(maxSessions)
	now := time.Unix(1000, 0)
	for i, o := range ops {
		now = now.Add(time.Second)
		var got any
		switch o.kind {
		case 0:
			got = x.UpdateFromStored(o.session, o.worker, o.parent, o.blocks, now)
		case 1:
			got = x.UpdateFromMatch(o.session, o.worker, o.matched(), now)
		case 2:
			x.Remove(o.worker, o.blocks)
		case 3:
			x.ClearWorker(o.worker)
		case 4:
			x.SetParent(o.session, "p"+o.worker, now)
		}
		if want := m.apply(o); !reflect.DeepEqual(got, want) {
			t.Fatalf("op %d %v: got %v, model %v", i, o, got, want)
		}
		checkInvariants(t, x)
		var ids []string
		for _, s := range x.Sessions(0) {
			ids = append(ids, s.ID)
		}
		// DeepEqual first: cmp.Diff on every step would dominate the run.
		if !reflect.DeepEqual(m.order, ids) {
			t.Fatalf("op %d %v: session order (-model +index):\n%s", i, o, cmp.Diff(m.order, ids))
		}
		for _, s := range m.order {
			if want, got := m.lineage(s), x.Lineage(s, ""); !reflect.DeepEqual(want, got) {
				t.Fatalf("op %d %v: lineage of %s (-model +index):\n%s", i, o, s, cmp.Diff(want, got))
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
	checkPaths(t, x)
}

// checkPaths checks the forest's cut into paths against the parent links
// it stands for: each node on its path one after its parent, each path's
// head hanging where its first node does and its tail the deepest node on
// it; and the ancestry and depth read from the paths against walking the
// parent links block by block.
func checkPaths(t *testing.T, x *Index) {
	t.Helper()
	tails := map[pathID]nodeID{}
	places := map[[2]int64]nodeID{}
	live := 0
	for id := 1; id < len(x.nodes); id++ {
		n := x.nodes[id]
		if !n.used {
			continue
		}
		if n.path == 0 || int(n.path) >= len(x.paths) {
			t.Fatalf("node %d on path %d", id, n.path)
		}
		if x.paths[n.path].head == nodeID(id) {
			live++
			if got := x.paths[n.path].parent; got != n.parent {
				t.Fatalf("node %d heads path %d under %d, hangs under %d", id, n.path, got, n.parent)
			}
		} else if p := x.nodes[n.parent]; p.path != n.path || p.pos != n.pos-1 {
			t.Fatalf("node %d at %d/%d, its parent %d at %d/%d", id, n.path, n.pos, n.parent, p.path, p.pos)
		}
		at := [2]int64{int64(n.path), int64(n.pos)}
		if other, dup := places[at]; dup {
			t.Fatalf("nodes %d and %d both at %d/%d", other, id, n.path, n.pos)
		}
		places[at] = nodeID(id)
		if tl, ok := tails[n.path]; !ok || x.nodes[tl].pos < n.pos {
			tails[n.path] = nodeID(id)
		}
	}
	for p, tl := range tails {
		if x.paths[p].tail != tl {
			t.Fatalf("path %d ends at %d, its deepest node is %d", p, x.paths[p].tail, tl)
		}
	}
	free := map[pathID]bool{}
	for _, p := range x.freePath {
		if _, used := tails[p]; used || free[p] || p == 0 || x.paths[p] != (path{}) {
			t.Fatalf("path %d free twice, in use, the sentinel or not cleared", p)
		}
		free[p] = true
	}
	if live != len(tails) || live+len(x.freePath) != len(x.paths)-1 {
		t.Fatalf("%d paths headed, %d with nodes, %d free, %d slots", live, len(tails), len(x.freePath), len(x.paths)-1)
	}
	walk := func(a, b nodeID) bool {
		for ; b != 0; b = x.nodes[b].parent {
			if a == b {
				return true
			}
		}
		return false
	}
	for a := 1; a < len(x.nodes); a++ {
		if !x.nodes[a].used {
			continue
		}
		d := 0
		for id := nodeID(a); id != 0; id = x.nodes[id].parent {
			d++
		}
		if got := x.depth(nodeID(a)); got != d {
			t.Fatalf("node %d: depth %d, walked %d", a, got, d)
		}
		// Asked as addFrontier asks it: of a node and a frontier, both ways.
		for _, s := range x.sessions {
			for _, fs := range s.frontiers {
				for _, f := range fs {
					for _, q := range [][2]nodeID{{nodeID(a), f}, {f, nodeID(a)}} {
						if got, want := x.isAncestorOrSelf(q[0], q[1]), walk(q[0], q[1]); got != want {
							t.Fatalf("is %d an ancestor of %d: paths say %v", q[0], q[1], got)
						}
					}
				}
			}
		}
	}
}
