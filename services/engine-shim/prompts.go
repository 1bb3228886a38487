package engineshim

import (
	"fmt"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	"switchyard.dev/pkg/basecache"
	"switchyard.dev/pkg/extent"
)

// errBaseNotHeld answers a Generate whose PromptBase this shim does not
// hold; the sender then sends the whole prompt.
var errBaseNotHeld = basecache.ErrBaseNotHeld

// prompts keeps the latest prompts this shim was sent, whole, so that a
// session's next turn may send only what it adds (GenerateRequest.base;
// package basecache says why and how they are forgotten). It is bounded by
// tokens, not entries (a prompt may be 2k or 200k tokens): in
// BenchmarkHotPath at 100k tokens, eight sessions run on four 512 Ki-token
// shims. A forgotten base costs the sender one NOT_FOUND and a resend. The
// salt and the adapter are checked again on use.
type prompts struct {
	blockSize int
	kept      *basecache.Store[*keptPrompt]
}

type keptPrompt struct {
	salt     string
	lora     string
	tokenIDs []uint32
	hashes   []uint64 // one per full block of tokenIDs
	// The arrays of tokenIDs and hashes may have room past their length,
	// which the prompt a session's next turn builds on this one is appended
	// into (package extent): at 100k tokens, copying the base into a new
	// array was a third of the shim's CPU per turn. nil: not shared (a
	// prompt sent whole, decoded into arrays of its own).
	idsExt, hashesExt *extent.Extent
}

// newPrompts keeps up to maxTokens tokens of prompts of blockSize-token
// blocks; nil (none kept) for maxTokens 0.
func newPrompts(blockSize, maxTokens int) *prompts {
	if maxTokens <= 0 || blockSize <= 0 {
		return nil
	}
	return &prompts{blockSize: blockSize, kept: basecache.NewStore(maxTokens, func(k *keptPrompt) int { return len(k.tokenIDs) })}
}

// whole is a request's whole prompt as expand made it, for keep: the
// arrays with their room and extents, of which the request carries views
// capped at their length. builtOn is the base's key (0: none).
type whole struct {
	builtOn           uint64
	ids               []uint32
	hashes            []uint64
	idsExt, hashesExt *extent.Extent
}

// expand makes req's prompt whole: with a base, its token ids and block
// hashes become the base's leading blocks followed by its own (req is the
// handler's, decoded for this call; no element of a kept prompt is written:
// req's are appended after them in their array when the base ends where
// that array is filled to, else copied).
func (p *prompts) expand(req *enginev1.GenerateRequest) (whole, error) {
	base := req.GetBase()
	if base == nil {
		return whole{}, nil
	}
	if p == nil {
		return whole{}, fmt.Errorf("%w: this shim keeps no prompts", errBaseNotHeld)
	}
	n := int(base.GetBlocks())
	k, err := p.kept.Get(base.GetKey(), func(k *keptPrompt) error {
		if k.salt != req.GetCacheSalt() || k.lora != req.GetLoraName() {
			return fmt.Errorf("%w: %016x is another tenant's or adapter's", errBaseNotHeld, base.GetKey())
		}
		if n < 1 || n > len(k.hashes) {
			return fmt.Errorf("%w: %016x has %d full blocks, %d were named", errBaseNotHeld, base.GetKey(), len(k.hashes), n)
		}
		return nil
	})
	if err != nil {
		return whole{}, err
	}
	w := whole{builtOn: base.GetKey()}
	w.ids, w.idsExt = basecache.After(k.tokenIDs, k.idsExt, n*p.blockSize, req.GetTokenIds())
	req.TokenIds = w.ids[:len(w.ids):len(w.ids)]
	// The base's hashes go first when the request's own are the rest of
	// the whole prompt's, one per full block: also when it adds no full
	// block and so sends none (it used to lose the base's too, to be hashed
	// again by the engine and not kept, so that the next turn went whole).
	if len(w.ids)/p.blockSize == n+len(req.GetBlockHashes()) {
		w.hashes, w.hashesExt = basecache.After(k.hashes, k.hashesExt, n, req.GetBlockHashes())
		req.BlockHashes = w.hashes[:len(w.hashes):len(w.hashes)]
	}
	req.Base = nil
	return w, nil
}

// keep holds req's whole prompt (w, as expand made it, when req had a
// base) and returns its key, 0 when it cannot be named (no block hashes,
// or a prompt shorter than a block) or is longer than the whole cache.
// The base req was expanded from, if any, is superseded by it (basecache.Store).
func (p *prompts) keep(req *enginev1.GenerateRequest, w whole) uint64 {
	if p == nil {
		return 0
	}
	ids, hashes := req.GetTokenIds(), req.GetBlockHashes()
	if w.ids != nil {
		ids = w.ids
	}
	if w.hashes != nil {
		hashes = w.hashes
	}
	if len(hashes) == 0 || len(hashes) != len(ids)/p.blockSize {
		return 0 // not one hash per full block: nothing to name it by
	}
	key := hashes[len(hashes)-1]
	if !p.kept.Put(key, &keptPrompt{salt: req.GetCacheSalt(), lora: req.GetLoraName(),
		tokenIDs: ids, hashes: hashes, idsExt: w.idsExt, hashesExt: w.hashesExt}, w.builtOn) {
		return 0
	}
	return key
}
