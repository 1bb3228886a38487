package engineshim

import (
	"container/list"
	"errors"
	"fmt"
	"slices"
	"sync"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	"switchyard.dev/pkg/extent"
)

// errBaseNotHeld answers a Generate whose PromptBase this shim does not
// hold; the sender then sends the whole prompt.
var errBaseNotHeld = errors.New("prompt base not held")

// prompts keeps the latest prompts this shim was sent, whole, so that a
// session's next turn may send only what it adds (GenerateRequest.base).
// An agent's turn resends its whole growing context: at 100k tokens that is
// 400 KB of token ids and 50 KB of block hashes a turn, nearly all of which
// the same worker was sent one turn earlier.
//
// It is bounded by tokens, not entries (a prompt may be 2k or 200k tokens),
// and forgets the least recently used first, except that a prompt that
// newer kept ones were built on, by every turn that kept it, goes first of
// all: its sessions name the newer ones next, and a base left where its
// use put it (at the front) made every session hold two prompts, pushing
// out other sessions' only one: in BenchmarkHotPath at 100k tokens (eight
// sessions on four 512 Ki-token shims) one turn in six was answered
// NOT_FOUND and sent again whole. A forgotten base costs the sender one
// NOT_FOUND and a resend. Keys are the prompts' last full-block sequence
// hashes, which cover every token before them and the tenant's cache salt;
// the salt and the adapter are checked again on use.
type prompts struct {
	blockSize int
	mu        sync.Mutex
	max       int // tokens
	tokens    int // held
	byKey     map[uint64]*list.Element
	order     *list.List // front = most recent; values are *keptPrompt
}

type keptPrompt struct {
	key      uint64
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
	// holders is how many turns kept this prompt that no later kept prompt
	// built on it has superseded: sessions whose prompts are the same
	// bytes (fanned-out sub-agents, best-of-n) share one.
	holders int
}

// newPrompts keeps up to maxTokens tokens of prompts of blockSize-token
// blocks; nil (none kept) for maxTokens 0.
func newPrompts(blockSize, maxTokens int) *prompts {
	if maxTokens <= 0 || blockSize <= 0 {
		return nil
	}
	return &prompts{blockSize: blockSize, max: maxTokens, byKey: map[uint64]*list.Element{}, order: list.New()}
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
	p.mu.Lock()
	defer p.mu.Unlock()
	el, ok := p.byKey[base.GetKey()]
	if !ok {
		return whole{}, fmt.Errorf("%w: %016x (forgotten, or the shim restarted)", errBaseNotHeld, base.GetKey())
	}
	k := el.Value.(*keptPrompt)
	n := int(base.GetBlocks())
	if k.salt != req.GetCacheSalt() || k.lora != req.GetLoraName() {
		return whole{}, fmt.Errorf("%w: %016x is another tenant's or adapter's", errBaseNotHeld, base.GetKey())
	}
	if n < 1 || n > len(k.hashes) {
		return whole{}, fmt.Errorf("%w: %016x has %d full blocks, %d were named", errBaseNotHeld, base.GetKey(), len(k.hashes), n)
	}
	p.order.MoveToFront(el)
	w := whole{builtOn: base.GetKey()}
	w.ids, w.idsExt = extendKept(k.tokenIDs, k.idsExt, n*p.blockSize, req.GetTokenIds())
	req.TokenIds = w.ids[:len(w.ids):len(w.ids)]
	// The base's hashes go first when the request's own are the rest of
	// the whole prompt's, one per full block: also when it adds no full
	// block and so sends none (it used to lose the base's too, to be hashed
	// again by the engine and not kept, so that the next turn went whole).
	if len(w.ids)/p.blockSize == n+len(req.GetBlockHashes()) {
		w.hashes, w.hashesExt = extendKept(k.hashes, k.hashesExt, n, req.GetBlockHashes())
		req.BlockHashes = w.hashes[:len(w.hashes):len(w.hashes)]
	}
	req.Base = nil
	return w, nil
}

// extendKept is kept's first cut elements followed by add. A session's
// next prompt repeats what its base had past the cut (the tokens of its
// last, partial block, and hashes only when the sender cut short): when add
// begins with them, add's rest is appended after kept, in place if kept
// ends where its array is filled to.
func extendKept[T comparable](kept []T, ext *extent.Extent, cut int, add []T) ([]T, *extent.Extent) {
	if tail := kept[cut:]; len(add) >= len(tail) && slices.Equal(add[:len(tail)], tail) {
		grown, ext := extent.Extend(kept, ext, len(add)-len(tail))
		return append(grown, add[len(tail):]...), ext
	}
	grown, ext := extent.Extend(kept[:cut], nil, len(add))
	return append(grown, add...), ext
}

// keep holds req's whole prompt (w, as expand made it, when req had a
// base) and returns its key, 0 when it cannot be named: no block hashes,
// or a prompt shorter than a block. The base req was expanded from, if
// any, is superseded by it: once no turn that kept the base is left
// unsuperseded, it moves behind every other prompt, still there for a
// retry of the same turn while nothing else needs the room.
func (p *prompts) keep(req *enginev1.GenerateRequest, w whole) uint64 {
	if p == nil {
		return 0
	}
	builtOn := w.builtOn
	ids, hashes := req.GetTokenIds(), req.GetBlockHashes()
	if w.ids != nil {
		ids = w.ids
	}
	if w.hashes != nil {
		hashes = w.hashes
	}
	if len(hashes) == 0 || len(hashes) != len(ids)/p.blockSize || len(ids) > p.max {
		return 0 // not one hash per full block: nothing to name it by
	}
	key := hashes[len(hashes)-1]
	p.mu.Lock()
	defer p.mu.Unlock()
	var base *keptPrompt // the prompt req supersedes, if still kept
	if el, ok := p.byKey[builtOn]; ok && builtOn != key {
		base = el.Value.(*keptPrompt)
	}
	holders := 1
	if el, ok := p.byKey[key]; ok {
		old := el.Value.(*keptPrompt)
		p.tokens -= len(old.tokenIDs)
		holders = old.holders + 1
		// The same turn again (a prompt that adds less than a block to its
		// base is its base; a retry finds its base superseded already):
		// no new holder.
		if builtOn == key || base != nil && base.holders == 0 {
			holders = max(old.holders, 1)
		}
		p.order.Remove(el)
	}
	p.byKey[key] = p.order.PushFront(&keptPrompt{key: key, salt: req.GetCacheSalt(), lora: req.GetLoraName(),
		tokenIDs: ids, hashes: hashes, idsExt: w.idsExt, hashesExt: w.hashesExt, holders: holders})
	p.tokens += len(ids)
	if base != nil && base.holders > 0 {
		if base.holders--; base.holders == 0 {
			p.order.MoveToBack(p.byKey[builtOn])
		}
	}
	for p.tokens > p.max {
		old := p.order.Remove(p.order.Back()).(*keptPrompt)
		delete(p.byKey, old.key)
		p.tokens -= len(old.tokenIDs)
	}
	return key
}
