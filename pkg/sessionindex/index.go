package sessionindex

import (
	"container/list"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"switchyard.dev/pkg/kv"
)

// DefaultMaxSessions is Dynamo's cap on tracked sessions.
const DefaultMaxSessions = 16384

// Config tunes an Index. A zero field takes its default.
type Config struct {
	// MaxSessions caps tracked sessions; the least recently touched session
	// is forgotten (with its frontiers) when a new one would exceed it.
	MaxSessions int
}

func (c Config) withDefaults() Config {
	if c.MaxSessions <= 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	return c
}

// Sentinel errors, matched with errors.Is on an *UpdateError or returned
// directly for malformed calls.
var (
	// ErrInvalid: an empty session, worker or block list, or a zero hash.
	ErrInvalid = errors.New("sessionindex: invalid update")
	// ErrUnknownParent: the parent hash is not in the forest and the update
	// does not reconnect known lineage.
	ErrUnknownParent = errors.New("sessionindex: unknown parent")
	// ErrConflictingParent: a block is already known with another parent.
	ErrConflictingParent = errors.New("sessionindex: conflicting parent")
	// ErrCyclicParent: applying the update would make a block its own ancestor.
	ErrCyclicParent = errors.New("sessionindex: cyclic parent")
)

// UpdateError describes a refused update. Nothing of the update was applied.
type UpdateError struct {
	Kind    error        // one of the sentinels above
	Session string       // session of the update
	Block   kv.BlockHash // the offending block (or parent)
}

func (e *UpdateError) Error() string {
	return fmt.Sprintf("%v: session %q block %#x", e.Kind, e.Session, uint64(e.Block))
}

func (e *UpdateError) Unwrap() error { return e.Kind }

// nodeID indexes Index.nodes; 0 is "no node" so the zero parent means root.
type nodeID uint32

type node struct {
	hash     kv.BlockHash
	parent   nodeID
	children uint32 // live nodes whose parent is this one
	refs     uint32 // (session, worker) frontiers pointing here
	path     pathID // the run of single descent this node lies on
	pos      int32  // its place on that path: one more than its parent's, below the head
	used     bool
}

// pathID indexes Index.paths; 0 is "no path".
type pathID uint32

// A path is a run of nodes each the parent of the next, from its head to
// its tail, numbered by pos. The forest is cut into paths as it grows: a
// node made under the tail of its parent's path extends that path, any
// other node heads a new one, and a root grafted under a path's tail joins
// the two paths (the shorter one is renumbered into the longer, so that
// putting a chain of n blocks together costs O(n log n) renumberings in
// whatever order its blocks are reported).
// An agent session's chain is a few long paths (a new one where a turn
// branched off the last), so asking whether one node is an ancestor of
// another hops from path to path instead of walking block by block: an
// update whose tail lies 1,600 blocks under the session's frontier (an
// engine offloading a chain tail first reports one block at a time) costs
// a few hops, not 1,600 steps (BenchmarkOffloadTailFirst; a chain reported
// leaf first, each block grafted above the last, is
// BenchmarkChainReportedLeafFirst).
type path struct {
	parent     nodeID // the head's parent; 0 for a path starting at a root
	head, tail nodeID
}

type session struct {
	id, parent string
	// frontiers per worker: a handful of branch tips, so a slice beats a map.
	frontiers map[string][]nodeID
	lastTouch time.Time
	elem      *list.Element
}

// Index is the lineage forest. Not safe for concurrent use.
type Index struct {
	cfg      Config
	nodes    []node // nodes[0] is the unused sentinel
	free     []nodeID
	paths    []path // paths[0] is the unused sentinel
	freePath []pathID
	byHash   map[kv.BlockHash]nodeID
	sessions map[string]*session
	lru      list.List // of *session, most recently touched at the front
	// workers is the reverse map worker → frontier node → sessions, so that
	// removals and clears touch only the sessions concerned.
	workers   map[string]map[nodeID]map[string]struct{}
	residency Residency
	stats     Stats
	// renumbered counts the nodes grafts have moved between paths, for the
	// test that bounds it (TestGraftsRenumberTheShorterPath).
	renumbered int
}

// Stats are counters and sizes.
type Stats struct {
	Sessions        int
	Nodes           int
	Frontiers       int
	EventsApplied   uint64 // Stored/match updates that changed or confirmed lineage, removals, clears
	RejectedUpdates uint64
	EvictedSessions uint64
}

// New returns an empty index.
func New(cfg Config) *Index {
	return &Index{
		cfg:       cfg.withDefaults(),
		nodes:     make([]node, 1, 1024),
		paths:     make([]path, 1, 256),
		byHash:    make(map[kv.BlockHash]nodeID),
		sessions:  make(map[string]*session),
		workers:   make(map[string]map[nodeID]map[string]struct{}),
		residency: NewResidency(),
	}
}

// Stats returns current sizes and counters.
func (x *Index) Stats() Stats {
	s := x.stats
	s.Sessions = len(x.sessions)
	s.Nodes = len(x.byHash)
	return s
}

// ---- node storage -------------------------------------------------------

func (x *Index) lookup(h kv.BlockHash) nodeID { return x.byHash[h] }

// slot is an index into items, one freed before (from free) or a new one.
func slot[T any, I ~uint32](items *[]T, free *[]I) I {
	if n := len(*free); n > 0 {
		id := (*free)[n-1]
		*free = (*free)[:n-1]
		return id
	}
	var zero T
	*items = append(*items, zero)
	return I(len(*items) - 1)
}

func (x *Index) alloc(h kv.BlockHash, parent nodeID) nodeID {
	id := slot(&x.nodes, &x.free)
	n := node{hash: h, parent: parent, used: true}
	if parent != 0 && x.paths[x.nodes[parent].path].tail == parent {
		n.path, n.pos = x.nodes[parent].path, x.nodes[parent].pos+1
		x.paths[n.path].tail = id
	} else {
		n.path = x.newPath(parent, id)
	}
	x.nodes[id] = n
	x.byHash[h] = id
	if parent != 0 {
		x.nodes[parent].children++
	}
	return id
}

func (x *Index) newPath(parent, head nodeID) pathID {
	p := slot(&x.paths, &x.freePath)
	x.paths[p] = path{parent: parent, head: head, tail: head}
	return p
}

func (x *Index) freePathID(p pathID) {
	x.paths[p] = path{}
	x.freePath = append(x.freePath, p)
}

// graft hangs root, which heads its path, under parent. When parent ends
// its own path the two become one: the shorter is renumbered into the
// longer, placed below parent or above root as the case is.
func (x *Index) graft(root, parent nodeID) {
	x.nodes[root].parent = parent
	x.nodes[parent].children++
	lower, upper := x.nodes[root].path, x.nodes[parent].path
	if x.paths[upper].tail != parent {
		x.paths[lower].parent = parent
		return
	}
	lo, up := x.paths[lower], x.paths[upper]
	if x.pathLen(lower) <= x.pathLen(upper) {
		// Below parent: the lower path's nodes continue the upper's count.
		shift := x.nodes[parent].pos + 1 - x.nodes[root].pos
		x.renumber(lo.tail, root, upper, shift)
		x.paths[upper].tail = lo.tail
		x.freePathID(lower)
	} else {
		// Above root: the upper path's nodes count back from root's place.
		shift := x.nodes[root].pos - 1 - x.nodes[parent].pos
		x.renumber(parent, up.head, lower, shift)
		x.paths[lower].head, x.paths[lower].parent = up.head, up.parent
		x.freePathID(upper)
	}
}

func (x *Index) pathLen(p pathID) int32 {
	return x.nodes[x.paths[p].tail].pos - x.nodes[x.paths[p].head].pos + 1
}

// renumber moves the nodes from tail up to head onto path p, each pos
// shifted by shift.
func (x *Index) renumber(tail, head nodeID, p pathID, shift int32) {
	for id := tail; ; id = x.nodes[id].parent {
		x.renumbered++
		x.nodes[id].path, x.nodes[id].pos = p, x.nodes[id].pos+shift
		if id == head {
			return
		}
	}
}

// release frees id and then every ancestor that is left with no child and no
// frontier: the forest stays exactly the union of live lineages.
func (x *Index) release(id nodeID) {
	for id != 0 {
		n := &x.nodes[id]
		if !n.used || n.refs > 0 || n.children > 0 {
			return
		}
		p := n.parent
		// A node with no child is its path's tail: the path ends one
		// node earlier, or with its head it is gone.
		if x.paths[n.path].head == id {
			x.freePathID(n.path)
		} else {
			x.paths[n.path].tail = p
		}
		delete(x.byHash, n.hash)
		*n = node{}
		x.free = append(x.free, id)
		if p != 0 {
			x.nodes[p].children--
		}
		id = p
	}
}

// isAncestorOrSelf reports whether a lies on the root path of b.
func (x *Index) isAncestorOrSelf(a, b nodeID) bool {
	pa := x.nodes[a].path
	for b != 0 {
		nb := &x.nodes[b]
		if nb.path == pa {
			return x.nodes[a].pos <= nb.pos
		}
		b = x.paths[nb.path].parent
	}
	return false
}

// ---- sessions and frontiers --------------------------------------------

func (x *Index) touch(id string, now time.Time) *session {
	s, ok := x.sessions[id]
	if ok {
		if now.After(s.lastTouch) {
			s.lastTouch = now
		}
		x.lru.MoveToFront(s.elem)
		return s
	}
	s = &session{id: id, frontiers: make(map[string][]nodeID), lastTouch: now}
	s.elem = x.lru.PushFront(s)
	x.sessions[id] = s
	return s
}

// enforceCap evicts least recently touched sessions past the cap. It runs
// after an update is applied, never before: evicting first could free the
// very nodes a validated update relies on. The session just touched is at
// the front of the LRU and so never the one evicted.
func (x *Index) enforceCap() {
	for len(x.sessions) > x.cfg.MaxSessions {
		e := x.lru.Back()
		x.dropSession(e.Value.(*session))
		x.stats.EvictedSessions++
	}
}

func (x *Index) dropSession(s *session) {
	for w, fs := range s.frontiers {
		for _, f := range slices.Clone(fs) {
			x.removeFrontier(s, w, f)
		}
	}
	x.lru.Remove(s.elem)
	delete(x.sessions, s.id)
}

// addFrontier applies the frontier rule for (s, w): an ancestor of an
// existing frontier is a no-op, a deeper node replaces the frontiers it
// extends, an unrelated node starts a new branch. The forest is acyclic,
// so once f is a proper ancestor of id, id cannot be an ancestor of f.
func (x *Index) addFrontier(s *session, w string, id nodeID) {
	var subsumed []nodeID
	for _, f := range s.frontiers[w] {
		switch {
		case f == id:
			return
		case x.isAncestorOrSelf(f, id):
			subsumed = append(subsumed, f)
		case x.isAncestorOrSelf(id, f):
			return
		}
	}
	s.frontiers[w] = append(s.frontiers[w], id)
	x.nodes[id].refs++
	fw := x.workers[w]
	if fw == nil {
		fw = make(map[nodeID]map[string]struct{})
		x.workers[w] = fw
	}
	ss := fw[id]
	if ss == nil {
		ss = make(map[string]struct{})
		fw[id] = ss
	}
	ss[s.id] = struct{}{}
	x.stats.Frontiers++
	// Drop the subsumed tips only now, so the shared path is never freed.
	for _, f := range subsumed {
		x.removeFrontier(s, w, f)
	}
}

func (x *Index) removeFrontier(s *session, w string, id nodeID) {
	fs := s.frontiers[w]
	i := slices.Index(fs, id)
	if i < 0 {
		return
	}
	fs = slices.Delete(fs, i, i+1)
	if len(fs) == 0 {
		delete(s.frontiers, w)
	} else {
		s.frontiers[w] = fs
	}
	if fw := x.workers[w]; fw != nil {
		if ss := fw[id]; ss != nil {
			delete(ss, s.id)
			if len(ss) == 0 {
				delete(fw, id)
			}
		}
		if len(fw) == 0 {
			delete(x.workers, w)
		}
	}
	x.nodes[id].refs--
	x.stats.Frontiers--
	x.release(id)
}

// ---- updates ------------------------------------------------------------

// UpdateFromStored records that session built blocks (root-first, each
// extending the previous; parent is the block the first extends, 0 for a
// root) on worker. The whole update is validated first; on error nothing is
// applied. A block already known as a root may be grafted under the parent
// the update names. An unknown non-zero parent is accepted only when the
// first block is already known as a root: the update then reconnects known
// lineage and the parent becomes that root's new parent.
func (x *Index) UpdateFromStored(sessionID, worker string, parent kv.BlockHash, blocks []kv.BlockHash, now time.Time) error {
	if err := x.validate(sessionID, worker, parent, blocks); err != nil {
		x.stats.RejectedUpdates++
		return err
	}
	s := x.touch(sessionID, now)
	prev := x.lookup(parent)
	if parent != 0 && prev == 0 {
		// Reconnecting: validate guaranteed blocks[0] is a known root.
		prev = x.alloc(parent, 0)
	}
	// Each new node is linked under the previous one as it is made, so the
	// chain is held by its child links until the tail gets its frontier.
	var tail nodeID
	for _, h := range blocks {
		id := x.lookup(h)
		switch {
		case id == 0:
			id = x.alloc(h, prev)
		case x.nodes[id].parent == 0 && prev != 0:
			// A former root heads its path (a node made without a
			// parent starts one, and only a root is grafted).
			x.graft(id, prev)
		}
		prev, tail = id, id
	}
	x.addFrontier(s, worker, tail)
	x.enforceCap()
	x.stats.EventsApplied++
	return nil
}

func (x *Index) validate(sessionID, worker string, parent kv.BlockHash, blocks []kv.BlockHash) error {
	if sessionID == "" || worker == "" || len(blocks) == 0 {
		return ErrInvalid
	}
	bad := func(kind error, h kv.BlockHash) error {
		return &UpdateError{Kind: kind, Session: sessionID, Block: h}
	}
	pos := make(map[kv.BlockHash]struct{}, len(blocks))
	for _, h := range blocks {
		if h == 0 {
			return ErrInvalid
		}
		if _, dup := pos[h]; dup {
			return bad(ErrCyclicParent, h)
		}
		pos[h] = struct{}{}
	}
	if _, self := pos[parent]; self && parent != 0 {
		return bad(ErrCyclicParent, parent)
	}
	pid := x.lookup(parent)
	if parent != 0 && pid == 0 {
		first := x.lookup(blocks[0])
		if first == 0 || x.nodes[first].parent != 0 {
			if first != 0 {
				return bad(ErrConflictingParent, blocks[0])
			}
			return bad(ErrUnknownParent, parent)
		}
	}
	// Each known block must already hang where the update says it does, or
	// be a root that the update may graft.
	want := pid
	wantHash := parent
	var grafted []nodeID
	for _, h := range blocks {
		id := x.lookup(h)
		if id != 0 {
			got := x.nodes[id].parent
			switch {
			case got == 0:
				// a root: grafting it under whatever precedes it is
				// allowed (cycles are checked below)
				if wantHash != 0 {
					grafted = append(grafted, id)
				}
			case wantHash == 0 || got != want:
				return bad(ErrConflictingParent, h)
			}
		}
		want, wantHash = id, h
	}
	// A cycle needs a new edge whose parent side already descends from its
	// child side. Only grafting a known root adds an edge into existing
	// lineage: a new block has nothing below it yet, and a known non-root
	// block was just found hanging where the update puts it. A root grafted
	// under a new block or another of the update's blocks lies, through the
	// update's own chain, under the parent; so the update closes a cycle
	// exactly when one of its grafted roots is the parent or above it. (Under
	// an unknown parent pid is 0 and nothing is above it: that parent is made
	// fresh.) The error names the first of the update's blocks met going up
	// from the parent, found by walking only once a cycle is certain.
	for _, r := range grafted {
		if pid != 0 && x.isAncestorOrSelf(r, pid) {
			for a := pid; ; a = x.nodes[a].parent {
				if _, in := pos[x.nodes[a].hash]; in {
					return bad(ErrCyclicParent, x.nodes[a].hash)
				}
			}
		}
	}
	return nil
}

// UpdateFromMatch records a route-time prefix hit: session's request matched
// up to matched on worker. It reports whether matched is a known block.
func (x *Index) UpdateFromMatch(sessionID, worker string, matched kv.BlockHash, now time.Time) bool {
	id := x.lookup(matched)
	if sessionID == "" || worker == "" || id == 0 {
		return false
	}
	x.addFrontier(x.touch(sessionID, now), worker, id)
	x.enforceCap()
	x.stats.EventsApplied++
	return true
}

// ApplyMatch records a route decision's prefix hit once the index has seen
// the worker's KV events for it: matched must be resident on worker (per
// Apply), so a decision never runs ahead of the physical facts. A matched
// block the forest does not know yet (the prefix was stored without a
// session id) brings its resident ancestry into the session's lineage, as a
// Stored update extending it would. It reports false when matched is not
// resident on worker, or its ancestry is not fully known: the caller may
// try again after the worker's next events.
func (x *Index) ApplyMatch(sessionID, worker string, matched kv.BlockHash, now time.Time) bool {
	if sessionID == "" || !x.residency.Has(worker, matched) {
		return false
	}
	if x.lookup(matched) != 0 {
		return x.UpdateFromMatch(sessionID, worker, matched, now)
	}
	parent, chain := x.reconnect(worker, matched, nil)
	if len(chain) == 0 {
		return false
	}
	return x.UpdateFromStored(sessionID, worker, parent, chain, now) == nil
}

// Remove records that blocks left worker entirely. Every frontier on a
// removed block recedes to its nearest ancestor not removed in the same call
// (or disappears past the root), so the result does not depend on the order
// of blocks. It returns how many frontiers moved.
func (x *Index) Remove(worker string, blocks []kv.BlockHash) int {
	if len(x.workers[worker]) == 0 {
		return 0
	}
	removed := make(map[kv.BlockHash]struct{}, len(blocks))
	for _, h := range blocks {
		removed[h] = struct{}{}
	}
	moved := 0
	for _, h := range blocks {
		id := x.lookup(h)
		if id == 0 {
			continue
		}
		ss := x.workers[worker][id]
		if len(ss) == 0 {
			continue
		}
		target := x.nodes[id].parent
		for target != 0 {
			if _, gone := removed[x.nodes[target].hash]; !gone {
				break
			}
			target = x.nodes[target].parent
		}
		for _, sid := range sortedKeys(ss) {
			s := x.sessions[sid]
			moved++
			if target == 0 {
				x.removeFrontier(s, worker, id)
				continue
			}
			// Hold the target while the tip goes, so it is never freed in
			// between; then it becomes the tip unless another branch of the
			// session already extends it.
			x.nodes[target].refs++
			x.removeFrontier(s, worker, id)
			x.addFrontier(s, worker, target)
			x.nodes[target].refs--
			x.release(target)
		}
	}
	if moved > 0 {
		x.stats.EventsApplied++
	}
	return moved
}

// ClearWorker drops every frontier on worker (Cleared event, new epoch,
// worker removed). It returns how many were dropped.
func (x *Index) ClearWorker(worker string) int {
	n := 0
	fw := x.workers[worker]
	ids := make([]nodeID, 0, len(fw))
	for id := range fw {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		for _, sid := range sortedKeys(fw[id]) {
			x.removeFrontier(x.sessions[sid], worker, id)
			n++
		}
	}
	x.residency.Clear(worker)
	x.stats.EventsApplied++
	return n
}

// SetParent records that sessionID is a sub-agent of parent.
func (x *Index) SetParent(sessionID, parent string, now time.Time) {
	if sessionID == "" || parent == sessionID {
		return
	}
	x.touch(sessionID, now).parent = parent
	x.enforceCap()
}

// ForgetSession drops a session and its frontiers.
func (x *Index) ForgetSession(sessionID string) bool {
	s, ok := x.sessions[sessionID]
	if ok {
		x.dropSession(s)
	}
	return ok
}

// ---- queries ------------------------------------------------------------

// Chain is one lineage of a session on a worker, root-first.
type Chain struct {
	Worker string
	Blocks []kv.BlockHash
	// Shared is how many leading blocks other lineages (other sessions, or
	// this session's other chains) also reach; Blocks[Shared:] belong to
	// this chain alone. A demote should leave the shared part alone.
	Shared int
}

// Frontier is the tip of one chain.
type Frontier struct {
	Worker string
	Block  kv.BlockHash
	Depth  int // blocks from the root, the tip included
}

// Lineage returns the session's chains, on one worker or (worker "") on
// all, sorted by worker and then by tip hash. An unknown session has none.
func (x *Index) Lineage(sessionID, worker string) []Chain {
	s := x.sessions[sessionID]
	if s == nil {
		return nil
	}
	var out []Chain
	for _, w := range x.sessionWorkers(s, worker) {
		for _, f := range x.sortedFrontiers(s.frontiers[w]) {
			b := x.path(f)
			out = append(out, Chain{Worker: w, Blocks: b, Shared: len(b) - x.exclusive(f)})
		}
	}
	return out
}

// Frontiers returns the tips of the session's chains, like Lineage.
func (x *Index) Frontiers(sessionID string) []Frontier {
	s := x.sessions[sessionID]
	if s == nil {
		return nil
	}
	var out []Frontier
	for _, w := range x.sessionWorkers(s, "") {
		for _, f := range x.sortedFrontiers(s.frontiers[w]) {
			out = append(out, Frontier{Worker: w, Block: x.nodes[f].hash, Depth: x.depth(f)})
		}
	}
	return out
}

// SessionsOnWorker lists the sessions with a frontier on worker, sorted.
func (x *Index) SessionsOnWorker(worker string) []string {
	set := map[string]struct{}{}
	for _, ss := range x.workers[worker] {
		for s := range ss {
			set[s] = struct{}{}
		}
	}
	return sortedKeys(set)
}

// Summary describes one session.
type Summary struct {
	ID, Parent string
	Workers    []string
	Frontiers  int
	MaxDepth   int
	LastTouch  time.Time
}

// Sessions lists up to limit sessions (all when limit <= 0), most recently
// touched first.
func (x *Index) Sessions(limit int) []Summary {
	var out []Summary
	for e := x.lru.Front(); e != nil && (limit <= 0 || len(out) < limit); e = e.Next() {
		out = append(out, x.summary(e.Value.(*session)))
	}
	return out
}

// Session describes one session, if known.
func (x *Index) Session(sessionID string) (Summary, bool) {
	s := x.sessions[sessionID]
	if s == nil {
		return Summary{}, false
	}
	return x.summary(s), true
}

func (x *Index) summary(s *session) Summary {
	sum := Summary{ID: s.id, Parent: s.parent, LastTouch: s.lastTouch, Workers: x.sessionWorkers(s, "")}
	for _, fs := range s.frontiers {
		sum.Frontiers += len(fs)
		for _, f := range fs {
			sum.MaxDepth = max(sum.MaxDepth, x.depth(f))
		}
	}
	return sum
}

func (x *Index) sessionWorkers(s *session, only string) []string {
	if only != "" {
		if _, ok := s.frontiers[only]; ok {
			return []string{only}
		}
		return nil
	}
	return sortedKeys(s.frontiers)
}

func (x *Index) sortedFrontiers(fs []nodeID) []nodeID {
	fs = slices.Clone(fs)
	slices.SortFunc(fs, func(a, b nodeID) int {
		ha, hb := x.nodes[a].hash, x.nodes[b].hash
		switch {
		case ha < hb:
			return -1
		case ha > hb:
			return 1
		}
		return 0
	})
	return fs
}

func (x *Index) path(id nodeID) []kv.BlockHash {
	var out []kv.BlockHash
	for ; id != 0; id = x.nodes[id].parent {
		out = append(out, x.nodes[id].hash)
	}
	slices.Reverse(out)
	return out
}

// exclusive counts the blocks from tip upwards that no other lineage
// reaches. Pruning keeps the forest exactly the union of lineages, so a
// node with another child or a frontier of its own leads to another
// lineage, and so does everything above it.
func (x *Index) exclusive(tip nodeID) int {
	n := 0
	for id, child := tip, nodeID(0); id != 0; id, child = x.nodes[id].parent, id {
		nd := &x.nodes[id]
		refs, children := nd.refs, nd.children
		if child == 0 {
			refs-- // the tip's own frontier
		} else {
			children-- // the path we came up by
		}
		if refs > 0 || children > 0 {
			break
		}
		n++
	}
	return n
}

func (x *Index) depth(id nodeID) int {
	d := 0
	for id != 0 {
		n := &x.nodes[id]
		p := &x.paths[n.path]
		d += int(n.pos-x.nodes[p.head].pos) + 1
		id = p.parent
	}
	return d
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
