package kv

import "fmt"

// BlockHash is a sequence hash: it names a full block of tokens together with
// every block before it (see package kvhash). Two prompts share a BlockHash at
// position i exactly when their first i+1 blocks are identical.
type BlockHash uint64

// LocalHash hashes one block's tokens alone, without its prefix.
type LocalHash uint64

// Tier is where a block's KV lives. Tiers are ordered from fastest to slowest.
type Tier uint8

const (
	TierDevice Tier = iota // GPU memory: usable at once
	TierHost               // pinned host memory: one PCIe transfer away
	TierDisk               // local disk or NVMe
	TierShared             // a shared KV pool across workers (Mooncake-like)
	numTiers
)

// NumTiers is the number of tiers, for arrays indexed by Tier.
const NumTiers = int(numTiers)

var tierNames = [...]string{"device", "host", "disk", "shared"}

func (t Tier) String() string {
	if int(t) < len(tierNames) {
		return tierNames[t]
	}
	return fmt.Sprintf("tier(%d)", uint8(t))
}

// Valid reports whether t is one of the known tiers.
func (t Tier) Valid() bool { return t < numTiers }

// EventKind says what happened to the blocks of an Event.
type EventKind uint8

const (
	// Stored: the blocks are newly resident on the tier. Blocks are listed
	// root-first and each extends the one before it; Parent, when non-zero, is
	// the block the first one extends.
	Stored EventKind = iota + 1
	// Removed: the blocks are no longer resident on the tier.
	Removed
	// Cleared: every block of the worker, on every tier, is gone.
	Cleared
)

func (k EventKind) String() string {
	switch k {
	case Stored:
		return "stored"
	case Removed:
		return "removed"
	case Cleared:
		return "cleared"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Event is one change to a worker's KV cache.
type Event struct {
	Kind   EventKind
	Tier   Tier
	Parent BlockHash   // Stored only; 0 when the first block is a root
	Blocks []BlockHash // root-first for Stored; any order for Removed
	// SessionID is the session whose request caused a Stored event, when
	// known. It is a hint for lineage tracking, not ownership.
	SessionID string
	// DPRank is the data-parallel rank inside the worker that holds the
	// blocks (0 unless the engine runs data parallel).
	DPRank uint32
}
