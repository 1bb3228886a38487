package engineevents

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvhash"
)

// MapperConfig configures a Mapper.
type MapperConfig struct {
	// BlockSize is Switchyard's tokens per block (kvhash.DefaultBlockSize
	// when <= 0). The engine's block size must be a multiple or a divisor
	// of it; other events are refused (counted in SizeMismatch).
	BlockSize int
}

// MapperStats counts what a Mapper did with the events it was given.
type MapperStats struct {
	Stored, Removed, Cleared uint64 // engine events applied
	// Orphans: stores whose parent engine hash is unknown (joined mid-stream
	// or the parent was dropped), so Switchyard's chain cannot be computed.
	Orphans uint64
	// UnknownRemovals: removals of an engine hash not held on that tier —
	// duplicates from offload connectors, or blocks never seen.
	UnknownRemovals uint64
	// Filtered: events of KV-cache groups that are not full attention
	// (sliding window, mamba, …), which do not hold reusable prefixes.
	Filtered uint64
	// Opaque: stores whose contents the tokens do not name (multimodal).
	Opaque uint64
	// SizeMismatch: the engine's block size is not a multiple or a divisor
	// of Switchyard's.
	SizeMismatch uint64
	// Announcements that named no known block (tier copies of unknown blocks).
	UnknownAnnouncements uint64
}

// ErrBlockSize is returned by CheckBlockSize for sizes the Mapper refuses.
var ErrBlockSize = errors.New("engineevents: engine block size must be a multiple or a divisor of Switchyard's")

// CheckBlockSize reports whether an engine block size can be mapped onto
// Switchyard's block size ours.
func CheckBlockSize(engine, ours int) error {
	if engine <= 0 || ours <= 0 || (engine%ours != 0 && ours%engine != 0) {
		return fmt.Errorf("%w: engine %d, switchyard %d", ErrBlockSize, engine, ours)
	}
	return nil
}

// engineKey names one engine block: hash, KV-cache group and DP rank.
type engineKey struct {
	hash  uint64
	group int64
	rank  int64
}

// engineEntry is what the Mapper knows about one engine block.
type engineEntry struct {
	// Switchyard blocks this engine block completes, root-first. With equal
	// block sizes exactly one; with a larger engine block several; with a
	// smaller one, only the engine block that ends a Switchyard block has
	// one (the others have none).
	ours []kv.BlockHash
	// prev is the Switchyard hash preceding ours[0] (0 at a root).
	prev kv.BlockHash
	// Chain state after this block, to extend children from: the seed, the
	// last full Switchyard hash and the tokens of a partial Switchyard block.
	seed uint64
	last kv.BlockHash
	tail []uint32
	// refs counts announcements per tier.
	refs [kv.NumTiers]uint32
	// one backs ours in the common one-to-one case (saves an allocation).
	one [1]kv.BlockHash
}

// ourEntry counts how many engine announcements hold a Switchyard block per
// tier; the block is resident on a tier while its count is positive.
type ourEntry struct {
	parent kv.BlockHash
	refs   [kv.NumTiers]uint32
}

// Mapper turns one worker's decoded engine events into kv.Events named by
// Switchyard's block hashes. It is not safe for concurrent use.
type Mapper struct {
	bs     int
	engine map[engineKey]*engineEntry
	ours   map[kv.BlockHash]*ourEntry
	stats  MapperStats
	run    run // what the event being mapped made resident, not yet emitted
}

// NewMapper returns an empty Mapper.
func NewMapper(cfg MapperConfig) *Mapper {
	bs := cfg.BlockSize
	if bs <= 0 {
		bs = kvhash.DefaultBlockSize
	}
	return &Mapper{bs: bs, engine: map[engineKey]*engineEntry{}, ours: map[kv.BlockHash]*ourEntry{}}
}

// Stats returns the counters so far.
func (m *Mapper) Stats() MapperStats { return m.stats }

// Len is the number of engine blocks mapped.
func (m *Mapper) Len() int { return len(m.engine) }

// Reset forgets every block (for a resynchronisation) and returns the event
// that tells consumers so.
func (m *Mapper) Reset() kv.Event {
	clear(m.engine)
	clear(m.ours)
	return kv.Event{Kind: kv.Cleared}
}

// Resolve returns the Switchyard hashes an engine block maps to (nil when
// unknown). The slice must not be modified.
func (m *Mapper) Resolve(hash uint64, group, rank int64) []kv.BlockHash {
	if e := m.engine[engineKey{hash, group, rank}]; e != nil {
		return e.ours
	}
	return nil
}

// Apply maps a decoded batch (from DP rank b.DPRank) and appends the
// resulting kv.Events to out.
func (m *Mapper) Apply(b *Batch, out []kv.Event) []kv.Event {
	for i := range b.Events {
		out = m.ApplyEvent(&b.Events[i], b.DPRank, out)
	}
	return out
}

// indexedKind reports whether a KV-cache group holds reusable prefix blocks.
func indexedKind(kind string) bool {
	switch kind {
	case "", "full_attention", "mla_attention", "sink_full_attention":
		return true
	}
	return false
}

// ApplyEvent maps one event and appends the resulting kv.Events to out.
func (m *Mapper) ApplyEvent(ev *Event, rank int64, out []kv.Event) []kv.Event {
	switch ev.Type {
	case AllBlocksCleared:
		m.stats.Cleared++
		return m.clearRank(rank, out)
	case BlockRemoved:
		m.stats.Removed++
		return m.remove(ev, rank, out)
	case BlockStored:
		m.stats.Stored++
		if !indexedKind(ev.SpecKind) {
			m.stats.Filtered++
			return out
		}
		if len(ev.Tokens) == 0 {
			return m.announce(ev, rank, out)
		}
		return m.store(ev, rank, out)
	}
	return out
}

// store maps a store that carries tokens.
func (m *Mapper) store(ev *Event, rank int64, out []kv.Event) []kv.Event {
	if ev.Opaque {
		m.stats.Opaque++
		return out
	}
	ebs := len(ev.Tokens) / len(ev.Hashes)
	if CheckBlockSize(ebs, m.bs) != nil {
		m.stats.SizeMismatch++
		return out
	}
	var seed uint64
	var last kv.BlockHash
	var tail []uint32
	if ev.HasParent {
		p := m.engine[engineKey{ev.Parent, ev.Group, rank}]
		if p == nil {
			m.stats.Orphans++
			return out
		}
		seed, last, tail = p.seed, p.last, p.tail
	} else {
		lora := ev.LoraName
		if lora == "" && ev.HasLoraID {
			// Only the deprecated id is known: keep the adapter's blocks
			// apart from the base model's, even if no lookup matches them.
			lora = fmt.Sprintf("lora_id:%d", ev.LoraID)
		}
		seed = kvhash.Seed(lora, ev.CacheSalt)
	}
	for i, h := range ev.Hashes {
		key := engineKey{h, ev.Group, rank}
		toks := ev.Tokens[i*ebs : (i+1)*ebs]
		e := m.engine[key]
		if e == nil {
			e = &engineEntry{seed: seed, prev: last}
			if len(tail) == 0 && len(toks) == m.bs { // equal sizes: the common case
				e.one[0] = chain(last, kvhash.LocalHash(toks, seed))
				e.ours, e.last = e.one[:], e.one[0]
			} else {
				e.ours, e.last, e.tail = m.extend(seed, last, tail, toks)
			}
			m.engine[key] = e
		}
		seed, last, tail = e.seed, e.last, e.tail
		out = m.hold(e, ev, out)
	}
	return m.run.flush(ev, out)
}

// hold counts one more announcement of engine block e on ev.Tier. On the
// first, the Switchyard blocks it completes that just became resident there
// join the run.
func (m *Mapper) hold(e *engineEntry, ev *Event, out []kv.Event) []kv.Event {
	e.refs[ev.Tier]++
	if e.refs[ev.Tier] > 1 {
		return out // another announcement already holds it
	}
	prev := e.prev
	for _, o := range e.ours {
		if m.holdOurs(o, prev, ev.Tier) {
			out = m.run.add(ev, prev, o, out)
		}
		prev = o
	}
	return out
}

// run gathers the Switchyard blocks one event makes resident into Stored
// events, one per unbroken chain; its memory is reused across events.
type run struct {
	parent kv.BlockHash // what blocks[0] extends
	blocks []kv.BlockHash
}

// add appends block o, which extends prev, emitting the run so far when o
// does not continue it.
func (r *run) add(ev *Event, prev, o kv.BlockHash, out []kv.Event) []kv.Event {
	if len(r.blocks) == 0 {
		r.parent = prev
	} else if r.blocks[len(r.blocks)-1] != prev {
		out = r.flush(ev, out)
		r.parent = prev
	}
	r.blocks = append(r.blocks, o)
	return out
}

// flush emits the run, if any, and empties it.
func (r *run) flush(ev *Event, out []kv.Event) []kv.Event {
	if len(r.blocks) > 0 {
		out = append(out, kv.Event{Kind: kv.Stored, Tier: ev.Tier, Parent: r.parent, Blocks: slices.Clone(r.blocks), SessionID: ev.SessionID})
		r.blocks = r.blocks[:0]
	}
	return out
}

// extend hashes one engine block's tokens onto a Switchyard chain.
func (m *Mapper) extend(seed uint64, last kv.BlockHash, tail, toks []uint32) (ours []kv.BlockHash, newLast kv.BlockHash, newTail []uint32) {
	buf := append(slices.Clip(tail), toks...)
	newLast = last
	for len(buf) >= m.bs {
		newLast = chain(newLast, kvhash.LocalHash(buf[:m.bs], seed))
		ours = append(ours, newLast)
		buf = buf[m.bs:]
	}
	if len(buf) > 0 {
		newTail = slices.Clone(buf)
	}
	return ours, newLast, newTail
}

// chain is kvhash's sequence step with 0 standing for "no parent".
func chain(parent kv.BlockHash, local kv.LocalHash) kv.BlockHash {
	if parent == 0 {
		return kvhash.Root(local)
	}
	return kvhash.Chain(parent, local)
}

// holdOurs counts one more holder of a Switchyard block on a tier and
// reports whether it just became resident there.
func (m *Mapper) holdOurs(h, parent kv.BlockHash, t kv.Tier) bool {
	o := m.ours[h]
	if o == nil {
		o = &ourEntry{parent: parent}
		m.ours[h] = o
	}
	o.refs[t]++
	return o.refs[t] == 1
}

// dropOurs releases one holder and reports whether the block just left the
// tier.
func (m *Mapper) dropOurs(h kv.BlockHash, t kv.Tier) bool {
	o := m.ours[h]
	if o == nil || o.refs[t] == 0 {
		return false
	}
	o.refs[t]--
	if o.refs[t] > 0 {
		return false
	}
	if o.refs == ([kv.NumTiers]uint32{}) {
		delete(m.ours, h)
	}
	return true
}

// announce maps a store without tokens: blocks already known (from a store
// with tokens on some tier) now also live on ev.Tier.
func (m *Mapper) announce(ev *Event, rank int64, out []kv.Event) []kv.Event {
	known := 0
	for _, h := range ev.Hashes {
		e := m.engine[engineKey{h, ev.Group, rank}]
		if e == nil {
			continue
		}
		known++
		out = m.hold(e, ev, out)
	}
	if known == 0 {
		m.stats.UnknownAnnouncements++
	}
	return m.run.flush(ev, out)
}

func (m *Mapper) remove(ev *Event, rank int64, out []kv.Event) []kv.Event {
	var gone []kv.BlockHash
	for _, h := range ev.Hashes {
		key := engineKey{h, ev.Group, rank}
		e := m.engine[key]
		if e == nil || e.refs[ev.Tier] == 0 {
			m.stats.UnknownRemovals++
			continue
		}
		e.refs[ev.Tier]--
		if e.refs[ev.Tier] > 0 {
			continue // a duplicate announcement still holds it
		}
		for _, o := range e.ours {
			if m.dropOurs(o, ev.Tier) {
				gone = append(gone, o)
			}
		}
		if e.refs == ([kv.NumTiers]uint32{}) {
			delete(m.engine, key)
		}
	}
	if len(gone) > 0 {
		out = append(out, kv.Event{Kind: kv.Removed, Tier: ev.Tier, Blocks: gone})
	}
	return out
}

// clearRank forgets one DP rank's blocks. When that rank held everything
// the consumers get one Cleared; otherwise the blocks that left, per tier.
func (m *Mapper) clearRank(rank int64, out []kv.Event) []kv.Event {
	other := false
	for k := range m.engine {
		if k.rank != rank {
			other = true
			break
		}
	}
	if !other {
		return append(out, m.Reset())
	}
	var gone [kv.NumTiers][]kv.BlockHash
	for k, e := range m.engine {
		if k.rank != rank {
			continue
		}
		for t := range kv.NumTiers {
			for ; e.refs[t] > 0; e.refs[t]-- {
				for _, o := range e.ours {
					if m.dropOurs(o, kv.Tier(t)) {
						gone[t] = append(gone[t], o)
					}
				}
			}
		}
		delete(m.engine, k)
	}
	for t, g := range gone {
		if len(g) > 0 {
			slices.Sort(g) // map order is random; keep output deterministic
			out = append(out, kv.Event{Kind: kv.Removed, Tier: kv.Tier(t), Blocks: g})
		}
	}
	return out
}

// Snapshot returns every resident Switchyard block as Stored events, one per
// block and tier, parents first where the parent is itself resident.
func (m *Mapper) Snapshot() []kv.Event {
	var out []kv.Event
	for h, o := range m.ours {
		for t := range kv.NumTiers {
			if o.refs[t] > 0 {
				out = append(out, kv.Event{Kind: kv.Stored, Tier: kv.Tier(t), Parent: o.parent, Blocks: []kv.BlockHash{h}})
			}
		}
	}
	// Deterministic order; consumers index blocks by hash so parents need
	// not precede children, but stable output makes snapshots comparable.
	slices.SortFunc(out, func(a, b kv.Event) int {
		if a.Tier != b.Tier {
			return int(a.Tier) - int(b.Tier)
		}
		return cmp.Compare(a.Blocks[0], b.Blocks[0])
	})
	return out
}
