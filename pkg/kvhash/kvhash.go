package kvhash

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"

	"switchyard.dev/pkg/kv"
)

// BaseSeed seeds every hash when no LoRA adapter or cache salt is in play, and
// always seeds the chaining of sequence hashes.
const BaseSeed uint64 = 1337

// DefaultBlockSize is the number of tokens in a KV block unless configured.
const DefaultBlockSize = 16

// Seed returns the local-hash seed for a LoRA adapter name and a cache salt.
// Empty strings mean "none". Tenants get distinct salts so that no prefix is
// ever shared, or observable, across tenants.
func Seed(loraName, cacheSalt string) uint64 {
	seed := BaseSeed
	if loraName != "" {
		seed += xxh3.HashStringSeed(loraName, 0)
	}
	if cacheSalt != "" {
		seed += xxh3.HashStringSeed(cacheSalt, 1)
	}
	return seed
}

// LocalHash hashes one block of tokens on its own.
func LocalHash(block []uint32, seed uint64) kv.LocalHash {
	var buf [4 * 64]byte
	var b []byte
	if n := 4 * len(block); n <= len(buf) {
		b = buf[:n]
	} else {
		b = make([]byte, n)
	}
	for i, t := range block {
		binary.LittleEndian.PutUint32(b[4*i:], t)
	}
	return kv.LocalHash(xxh3.HashSeed(b, seed))
}

// Chain extends a sequence: the hash of the block with local hash local whose
// predecessor's sequence hash is parent. The first block of a sequence has no
// parent and its sequence hash equals its local hash (see Root).
func Chain(parent kv.BlockHash, local kv.LocalHash) kv.BlockHash {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], uint64(parent))
	binary.LittleEndian.PutUint64(b[8:], uint64(local))
	return kv.BlockHash(xxh3.HashSeed(b[:], BaseSeed))
}

// Root is the sequence hash of a first block.
func Root(local kv.LocalHash) kv.BlockHash { return kv.BlockHash(local) }

// Hasher turns token sequences into block hashes for one block size and seed.
type Hasher struct {
	BlockSize int
	Seed      uint64
}

// New returns a Hasher for the block size (DefaultBlockSize if <= 0), LoRA
// adapter and cache salt.
func New(blockSize int, loraName, cacheSalt string) Hasher {
	if blockSize <= 0 {
		blockSize = DefaultBlockSize
	}
	return Hasher{BlockSize: blockSize, Seed: Seed(loraName, cacheSalt)}
}

// Blocks returns the sequence hashes of every full block of tokens. The
// partial tail block, if any, is not hashed.
func (h Hasher) Blocks(tokens []uint32) []kv.BlockHash {
	return h.Extend(nil, tokens)
}

// Extend appends to prev (the sequence hashes of tokens[:len(prev)*BlockSize])
// the hashes of the remaining full blocks of tokens, reusing prev's work. It is
// what makes a new turn of a session cost only its new suffix.
func (h Hasher) Extend(prev []kv.BlockHash, tokens []uint32) []kv.BlockHash {
	bs := h.BlockSize
	n := len(tokens) / bs
	out := prev
	if cap(out) < n {
		grown := make([]kv.BlockHash, len(prev), n)
		copy(grown, prev)
		out = grown
	}
	for i := len(prev); i < n; i++ {
		local := LocalHash(tokens[i*bs:(i+1)*bs], h.Seed)
		if i == 0 {
			out = append(out, Root(local))
		} else {
			out = append(out, Chain(out[i-1], local))
		}
	}
	return out
}
