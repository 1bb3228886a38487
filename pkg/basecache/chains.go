package basecache

import (
	"fmt"

	"switchyard.dev/pkg/extent"
)

// Chains keeps block-hash chains (a prompt's sequence hashes, root first),
// bounded by the hashes held.
type Chains struct{ store *Store[*chain] }

type chain struct {
	hashes []uint64
	// The array of hashes may have room past its length, which the chain a
	// session's next request builds on this one is appended into.
	ext *extent.Extent
	tag int
}

// chainOverhead is what a kept chain costs besides its array, in hashes
// (8 bytes each): its map slot, list element, entry, chain and extent, about
// 150 bytes. A chain is counted by its array's capacity (with the room it
// keeps for the next turn's hashes, n/8 + 64 once it has grown in place)
// plus this: a store of many short chains is bounded by its memory, not by
// its hashes alone.
const chainOverhead = 19

// DefaultChainHashes is the services' default bound on kept chains, in
// hashes (8 bytes each): 2 MiB, the chains of about 35 sessions of 100k
// tokens (16-token blocks, about 7,100 hashes each with their room and
// bookkeeping), a few times the 100k-token sessions a small fleet's GPUs
// hold at once, or of about 3,000 short ones. A larger fleet wants about
// 57 KB more per 100k-token session a scheduler replica owns.
const DefaultChainHashes = 1 << 18

// NewChains keeps chains of up to maxHashes hashes in all (8 bytes each;
// each chain counted by its array's capacity, its bookkeeping as
// chainOverhead more); nil (none kept, every base not held) for 0.
func NewChains(maxHashes int) *Chains {
	s := NewStore(maxHashes, func(c *chain) int { return cap(c.hashes) + chainOverhead })
	if s == nil {
		return nil
	}
	return &Chains{store: s}
}

// Chain is a request's whole chain, made by Expand (or whole as sent), for
// Keep.
type Chain struct {
	// Hashes is the whole chain, a view capped at its length (an append
	// copies).
	Hashes []uint64
	// Tag is the keeper's own note, kept with the chain and returned with
	// the chains expanded from it (the scheduler: which flash indexer kept
	// the chain too).
	Tag     int
	full    []uint64 // Hashes, with the array's room
	ext     *extent.Extent
	builtOn uint64
}

// Whole is a chain sent whole.
func Whole(hashes []uint64) Chain { return Chain{Hashes: hashes, full: hashes} }

// Expand is the first blocks hashes of the chain kept under key followed by
// rest. It fails with ErrBaseNotHeld (wrapped, saying why) when no such
// chain is kept or it has fewer hashes, and the sender then sends the chain
// whole.
func (c *Chains) Expand(key uint64, blocks int, rest []uint64) (Chain, error) {
	var store *Store[*chain] // nil keeps nothing
	if c != nil {
		store = c.store
	}
	base, err := store.Get(key, func(ch *chain) error {
		if blocks < 1 || blocks > len(ch.hashes) {
			return fmt.Errorf("%w: %016x has %d blocks, %d were named", ErrBaseNotHeld, key, len(ch.hashes), blocks)
		}
		return nil
	})
	if err != nil {
		return Chain{}, err
	}
	full, ext := After(base.hashes, base.ext, blocks, rest)
	return Chain{Hashes: full[:len(full):len(full)], Tag: base.tag, full: full, ext: ext, builtOn: key}, nil
}

// Keep holds ch for the session's next request to name and returns its key
// (its last hash), 0 when it is not kept (empty, or longer than the store).
func (c *Chains) Keep(ch Chain) uint64 {
	if c == nil || len(ch.full) == 0 {
		return 0
	}
	key := ch.full[len(ch.full)-1]
	if !c.store.Put(key, &chain{hashes: ch.full, ext: ch.ext, tag: ch.Tag}, ch.builtOn) {
		return 0
	}
	return key
}

// Hashes is how many hashes are kept, the chains' bookkeeping counted.
func (c *Chains) Hashes() int {
	if c == nil {
		return 0
	}
	return c.store.Used()
}
