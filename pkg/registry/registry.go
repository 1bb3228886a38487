package registry

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"switchyard.dev/pkg/agentctx"
	"switchyard.dev/pkg/hints"
)

// ErrUnknownWorker means the worker is not registered (never was, or its
// lease lapsed): it must register again.
var ErrUnknownWorker = errors.New("registry: unknown worker")

// ErrInvalidWorker means a registration is missing what routing needs.
var ErrInvalidWorker = errors.New("registry: invalid worker")

// Capacity is how much KV a worker can hold.
type Capacity struct {
	GPUBlocks  int
	HostBlocks int
	DiskBlocks int
	// KVCapacityTokens is the KV a worker can retain, offload tiers
	// included; admission control packs programs against it.
	KVCapacityTokens int64
	MaxRunning       int // max running requests; 0 = unknown
}

// TierTokens splits KVCapacityTokens over the device, host and disk tiers.
// Every tier has the engine's block size, so a tier's share of the tokens is
// its share of the blocks; a worker that reports no blocks per tier has them
// all on the device.
func (c Capacity) TierTokens() [3]int64 {
	blocks := int64(c.GPUBlocks) + int64(c.HostBlocks) + int64(c.DiskBlocks)
	if blocks <= 0 {
		return [3]int64{c.KVCapacityTokens, 0, 0}
	}
	per := func(b int) int64 { return c.KVCapacityTokens * int64(b) / blocks }
	return [3]int64{per(c.GPUBlocks), per(c.HostBlocks), per(c.DiskBlocks)}
}

// Load is a worker's load at one instant, as its heartbeat reports it.
type Load struct {
	RunningRequests int
	WaitingRequests int
	ActiveKVBlocks  int // GPU blocks referenced by running requests
	UsedKVBlocks    int // GPU blocks holding any KV
	TotalKVBlocks   int
	PrefixHitRate   float64
	Preemptions     uint64
	ObservedAt      time.Time
	// HostUsedBlocks and DiskUsedBlocks are the offload tiers' blocks
	// holding KV; nil where the engine does not say.
	HostUsedBlocks, DiskUsedBlocks *uint32
	// EvictedBlocks and RePrefilledTokens count since the engine started:
	// device blocks evicted, and prompt tokens computed again after a
	// preemption; nil where the engine does not say.
	EvictedBlocks, RePrefilledTokens *uint64
}

// Worker is one engine instance with its shim. Values returned by the
// registry are copies; changing them changes nothing.
type Worker struct {
	ID        string
	Address   string // gRPC address of the shim
	Engine    string
	Model     string
	BlockSize int
	DPSize    int
	Capacity  Capacity
	Epoch     uint64
	// Hints is what the worker's engine announced it acts on of the KV
	// hints; the hint emitter reads it from the worker watch.
	Hints hints.Support

	RegisteredAt time.Time
	// Filled in by reads that join the lease table:
	Load           Load
	LeaseExpiresAt time.Time
}

// sameMembership reports whether two registrations describe the same worker,
// so that a re-registration that changes nothing wakes no watcher.
func sameMembership(a, b *Worker) bool {
	return a.ID == b.ID && a.Address == b.Address && a.Engine == b.Engine && a.Model == b.Model &&
		a.BlockSize == b.BlockSize && a.DPSize == b.DPSize && a.Capacity == b.Capacity && a.Epoch == b.Epoch &&
		a.Hints.Equal(b.Hints)
}

type lease struct {
	ID        string
	Load      Load
	ExpiresAt time.Time
}

// join fills in what the lease says of its worker.
func (l *lease) join(w *Worker) { w.Load, w.LeaseExpiresAt = l.Load, l.ExpiresAt }

// Config holds the registry's knobs.
type Config struct {
	// LeaseTTL is how long a worker lives without a heartbeat.
	LeaseTTL time.Duration
}

// DefaultConfig returns the defaults: a 10 s lease, renewed by shims every
// third of it.
func DefaultConfig() Config { return Config{LeaseTTL: 10 * time.Second} }

// Registry is the worker table. It is safe for concurrent use: memdb
// serialises writers and readers see snapshots.
type Registry struct {
	cfg Config
	db  *memdb.MemDB
	// snap is the live worker set with loads, sorted by id, as immutable
	// values: the request path reads it without a transaction (iterating
	// memdb costs about a microsecond per row, too much for every route).
	// Writers replace it while they hold memdb's write lock, so it changes
	// in the same order as the tables.
	snap atomic.Pointer[View]
}

// View is one immutable snapshot of the live workers, with each worker's
// position in it.
type View struct {
	// Workers are sorted by id; the slice and the workers are shared and
	// must not be modified.
	Workers []*Worker
	pos     map[string]int // id → index in Workers
}

// Index returns the position of worker id in Workers, -1 when absent. The
// request path places a thousand workers' overlaps with it: one map probe
// each, the map rebuilt only when membership changes.
func (v *View) Index(id string) int {
	if i, ok := v.pos[id]; ok {
		return i
	}
	return -1
}

// New returns an empty registry; a nil cfg means DefaultConfig().
func New(cfg *Config) (*Registry, error) {
	c := DefaultConfig()
	if cfg != nil && *cfg != (Config{}) {
		c = *cfg
	}
	if c.LeaseTTL <= 0 {
		return nil, fmt.Errorf("registry: lease TTL %v must be positive", c.LeaseTTL)
	}
	db, err := memdb.NewMemDB(schema())
	if err != nil {
		return nil, err
	}
	r := &Registry{cfg: c, db: db}
	r.snap.Store(&View{})
	return r, nil
}

// Snapshot returns every worker with its load, sorted by id. The slice and
// the workers are shared and must not be modified.
func (r *Registry) Snapshot() []*Worker { return r.snap.Load().Workers }

// View returns the current snapshot with its position index.
func (r *Registry) View() *View { return r.snap.Load() }

// setSnap replaces (or, with w nil, removes) one worker in the snapshot.
// Callers hold the memdb write transaction (memdb admits one writer at a
// time), which makes this read-modify-write safe and keeps the snapshot in
// commit order.
func (r *Registry) setSnap(id string, w *Worker) {
	cur := r.snap.Load()
	old := cur.Workers
	i := sort.Search(len(old), func(i int) bool { return old[i].ID >= id })
	found := i < len(old) && old[i].ID == id
	var next []*Worker
	switch {
	case w == nil && !found:
		return
	case w == nil:
		next = make([]*Worker, 0, len(old)-1)
		next = append(append(next, old[:i]...), old[i+1:]...)
	case found:
		// A new load or lease: positions stay, and so does the index.
		next = append([]*Worker(nil), old...)
		next[i] = w
		r.snap.Store(&View{Workers: next, pos: cur.pos})
		return
	default:
		next = make([]*Worker, 0, len(old)+1)
		next = append(append(append(next, old[:i]...), w), old[i:]...)
	}
	pos := make(map[string]int, len(next))
	for j, w := range next {
		pos[w.ID] = j
	}
	r.snap.Store(&View{Workers: next, pos: pos})
}

// LeaseTTL is the lease every worker is granted.
func (r *Registry) LeaseTTL() time.Duration { return r.cfg.LeaseTTL }

// Register adds the worker, or replaces the one with the same id, and grants
// a lease. It reports whether membership changed (a new worker, or a changed
// address, epoch, capacity...).
func (r *Registry) Register(now time.Time, w Worker) (changed bool, err error) {
	if w.ID == "" {
		return false, fmt.Errorf("%w: empty worker id", ErrInvalidWorker)
	}
	if len(w.ID) > agentctx.MaxIDBytes {
		// Its turns' finishes name it, and may carry no longer an id.
		return false, fmt.Errorf("%w: worker_id of %d bytes; at most %d", ErrInvalidWorker, len(w.ID), agentctx.MaxIDBytes)
	}
	if w.Address == "" {
		return false, fmt.Errorf("%w: worker %q has no address", ErrInvalidWorker, w.ID)
	}
	if w.BlockSize < 0 || w.DPSize < 0 || w.Capacity.KVCapacityTokens < 0 {
		return false, fmt.Errorf("%w: worker %q has negative sizes", ErrInvalidWorker, w.ID)
	}
	txn := r.db.Txn(true)
	defer txn.Abort()
	old, err := txn.First(tableWorkers, indexID, w.ID)
	if err != nil {
		return false, err
	}
	stored := w
	stored.Load, stored.LeaseExpiresAt = Load{}, time.Time{}
	stored.Hints.Caps = slices.Clone(w.Hints.Caps) // the caller's slice stays the caller's
	if prev, ok := old.(*Worker); ok && sameMembership(prev, &stored) {
		stored.RegisteredAt = prev.RegisteredAt
	} else {
		stored.RegisteredAt = now
		if err := txn.Insert(tableWorkers, &stored); err != nil {
			return false, err
		}
		changed = true
	}
	l := &lease{ID: w.ID, Load: w.Load, ExpiresAt: now.Add(r.cfg.LeaseTTL)}
	if err := txn.Insert(tableLeases, l); err != nil {
		return false, err
	}
	view := stored
	l.join(&view)
	r.setSnap(w.ID, &view) // under the write lock, so in commit order
	txn.Commit()
	return changed, nil
}

// Heartbeat renews a worker's lease and records its load.
func (r *Registry) Heartbeat(now time.Time, id string, load Load) error {
	txn := r.db.Txn(true)
	defer txn.Abort()
	old, err := txn.First(tableLeases, indexID, id)
	if err != nil {
		return err
	}
	if old == nil {
		return fmt.Errorf("%w: %q", ErrUnknownWorker, id)
	}
	l := &lease{ID: id, Load: load, ExpiresAt: now.Add(r.cfg.LeaseTTL)}
	if err := txn.Insert(tableLeases, l); err != nil {
		return err
	}
	obj, err := txn.First(tableWorkers, indexID, id)
	if err != nil || obj == nil {
		return fmt.Errorf("%w: %q has a lease but no record", ErrUnknownWorker, id)
	}
	view := *obj.(*Worker)
	l.join(&view)
	r.setSnap(id, &view)
	txn.Commit()
	return nil
}

// Deregister removes a worker at once and returns it as it was.
func (r *Registry) Deregister(id string) (Worker, error) {
	txn := r.db.Txn(true)
	defer txn.Abort()
	w, err := r.remove(txn, id)
	if err != nil {
		return Worker{}, err
	}
	r.setSnap(id, nil)
	txn.Commit()
	return w, nil
}

// DeregisterIf removes worker id only while it is still the registration
// the caller judged (same epoch and address), in one transaction: a worker
// that registered again meanwhile stays. ok reports whether it was removed.
func (r *Registry) DeregisterIf(id string, epoch uint64, address string) (w Worker, ok bool, err error) {
	txn := r.db.Txn(true)
	defer txn.Abort()
	obj, err := txn.First(tableWorkers, indexID, id)
	if err != nil || obj == nil {
		return Worker{}, false, err
	}
	if cur := obj.(*Worker); cur.Epoch != epoch || cur.Address != address {
		return Worker{}, false, nil
	}
	if w, err = r.remove(txn, id); err != nil {
		return Worker{}, false, err
	}
	r.setSnap(id, nil)
	txn.Commit()
	return w, true, nil
}

func (r *Registry) remove(txn *memdb.Txn, id string) (Worker, error) {
	obj, err := txn.First(tableWorkers, indexID, id)
	if err != nil {
		return Worker{}, err
	}
	if obj == nil {
		return Worker{}, fmt.Errorf("%w: %q", ErrUnknownWorker, id)
	}
	w := *obj.(*Worker)
	if err := txn.Delete(tableWorkers, obj); err != nil {
		return Worker{}, err
	}
	if l, err := txn.First(tableLeases, indexID, id); err == nil && l != nil {
		l.(*lease).join(&w)
		if err := txn.Delete(tableLeases, l); err != nil {
			return Worker{}, err
		}
	}
	return w, nil
}

// Expire removes every worker whose lease ran out by now and returns them.
func (r *Registry) Expire(now time.Time) ([]Worker, error) {
	txn := r.db.Txn(true)
	defer txn.Abort()
	it, err := txn.Get(tableLeases, indexID)
	if err != nil {
		return nil, err
	}
	var dead []string
	for obj := it.Next(); obj != nil; obj = it.Next() {
		if l := obj.(*lease); !now.Before(l.ExpiresAt) {
			dead = append(dead, l.ID)
		}
	}
	if len(dead) == 0 {
		return nil, nil
	}
	removed := make([]Worker, 0, len(dead))
	for _, id := range dead {
		w, err := r.remove(txn, id)
		if err != nil {
			return nil, err
		}
		removed = append(removed, w)
	}
	for _, w := range removed {
		r.setSnap(w.ID, nil)
	}
	txn.Commit()
	return removed, nil
}

// Get returns one worker with its load.
func (r *Registry) Get(id string) (Worker, bool) {
	txn := r.db.Txn(false)
	obj, err := txn.First(tableWorkers, indexID, id)
	if err != nil || obj == nil {
		return Worker{}, false
	}
	w := *obj.(*Worker)
	if l, err := txn.First(tableLeases, indexID, id); err == nil && l != nil {
		l.(*lease).join(&w)
	}
	return w, true
}

// List returns every worker with its load, sorted by id. Pass a watch set to
// be woken by the next change of membership or load; nil for none.
func (r *Registry) List(ws memdb.WatchSet) ([]Worker, error) {
	txn := r.db.Txn(false)
	wit, err := rows(txn, tableWorkers, ws)
	if err != nil {
		return nil, err
	}
	lit, err := rows(txn, tableLeases, ws)
	if err != nil {
		return nil, err
	}
	var out []Worker
	// Both tables iterate in id order: a merge join, no per-worker lookup.
	l := lit.Next()
	for obj := wit.Next(); obj != nil; obj = wit.Next() {
		w := *obj.(*Worker)
		for l != nil && l.(*lease).ID < w.ID {
			l = lit.Next()
		}
		if l != nil && l.(*lease).ID == w.ID {
			l.(*lease).join(&w)
		}
		out = append(out, w)
	}
	return out, nil
}

// Members returns the worker set without load, sorted by id, and adds to ws
// a channel that fires when membership changes (not on heartbeats).
func (r *Registry) Members(ws memdb.WatchSet) ([]Worker, error) {
	it, err := rows(r.db.Txn(false), tableWorkers, ws)
	if err != nil {
		return nil, err
	}
	var out []Worker
	for obj := it.Next(); obj != nil; obj = it.Next() {
		out = append(out, *obj.(*Worker))
	}
	return out, nil
}

// rows iterates a table in id order and adds its watch channel to ws (a nil
// WatchSet ignores it).
func rows(txn *memdb.Txn, table string, ws memdb.WatchSet) (memdb.ResultIterator, error) {
	it, err := txn.Get(table, indexID)
	if err != nil {
		return nil, err
	}
	ws.Add(it.WatchCh())
	return it, nil
}

// Len is the number of registered workers.
func (r *Registry) Len() int {
	ws, _ := r.Members(nil)
	return len(ws)
}
