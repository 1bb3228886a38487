package engineevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"switchyard.dev/pkg/kv"
)

// Type is an engine KV event's kind.
type Type uint8

const (
	BlockStored Type = iota + 1
	BlockRemoved
	AllBlocksCleared
)

func (t Type) String() string {
	switch t {
	case BlockStored:
		return "BlockStored"
	case BlockRemoved:
		return "BlockRemoved"
	case AllBlocksCleared:
		return "AllBlocksCleared"
	}
	return "Type(" + strconv.Itoa(int(t)) + ")"
}

// Event is one decoded engine event, in the engine's own terms. Slices point
// into the Batch's arenas and are valid until the Batch is decoded into again.
type Event struct {
	Type Type
	// Hashes are the engine's block hashes, normalised to uint64: integers
	// as sent (int64 bit patterns kept), byte strings by their last 8 bytes
	// big-endian (what vLLM's integer form publishes).
	Hashes []uint64
	// Parent is the engine hash the first block extends; HasParent is false
	// for the first block of a request.
	Parent    uint64
	HasParent bool
	// Tokens are the stored blocks' token ids (Stored only); empty for
	// announcements of blocks copied to another tier.
	Tokens []uint32
	// BlockSize is the engine's tokens per block; 0 when not sent.
	BlockSize int
	// Tier is the storage tier the medium names (device when absent).
	Tier kv.Tier
	// LoraName and CacheSalt enter Switchyard's hash seed. CacheSalt comes
	// from SGLang's metadata map or map field, or from vLLM's extra keys of
	// the request's first block.
	LoraName  string
	CacheSalt string
	// LoraID is vLLM's deprecated integer adapter id (HasLoraID when sent).
	LoraID    int64
	HasLoraID bool
	// SessionID is the session whose request caused the store, when sent.
	SessionID string
	// Group is the KV-cache group (hybrid memory allocator); 0 when absent.
	Group int64
	// SpecKind is the group's attention kind, "" when not sent.
	SpecKind string
	// Opaque is set when the extra keys say the tokens alone do not name the
	// blocks' contents (multimodal inputs, prompt embeddings): Switchyard's
	// token hashes would alias different contents, so such stores are not
	// indexed.
	Opaque bool
}

// Batch is one decoded EventBatch. Reuse a Batch across DecodeBatch calls to
// reuse its memory.
type Batch struct {
	Timestamp float64
	// DPRank is the publisher's data-parallel rank (HasDPRank when sent).
	DPRank    int64
	HasDPRank bool
	Events    []Event
	// Malformed counts events that could not be decoded; Unknown counts
	// events of an unknown type or with an unknown medium. Both were
	// skipped; the batch's other events stand.
	Malformed int
	Unknown   int
	// FirstErr describes the first skipped event, for logs.
	FirstErr error

	hashes []uint64
	tokens []uint32
}

func (b *Batch) reset() {
	b.Timestamp, b.DPRank, b.HasDPRank = 0, 0, false
	clear(b.Events) // drop string references
	b.Events = b.Events[:0]
	b.Malformed, b.Unknown, b.FirstErr = 0, 0, nil
	b.hashes = b.hashes[:0]
	b.tokens = b.tokens[:0]
}

// ErrBatch wraps failures of the batch envelope itself (not of one event).
var ErrBatch = errors.New("engineevents: malformed batch")

var (
	errUnknownType   = errors.New("unknown event type")
	errUnknownMedium = errors.New("unknown medium")
	errField         = errors.New("bad field")
)

// DecodeBatch decodes one msgpack EventBatch payload into b (reset first).
//
// The envelope is positional: [ts, events] or [ts, events, dp_rank], with
// any further elements ignored. Each event is positional (["BlockStored",
// …]) or a map ({"type": "BlockStored", …}); a malformed or unknown event is
// counted in b and skipped. A non-nil error means the envelope itself is
// damaged (wrapped ErrBatch); b then holds the events decoded before the
// damage.
func DecodeBatch(payload []byte, b *Batch) error {
	b.reset()
	r := reader{b: payload}
	n, err := r.arrayLen()
	if err != nil {
		return fmt.Errorf("%w: envelope: %v", ErrBatch, err)
	}
	if n < 2 {
		return fmt.Errorf("%w: envelope has %d elements, want 2 or 3", ErrBatch, n)
	}
	if r.nilNext() {
		b.Timestamp = 0
	} else if b.Timestamp, err = r.number(); err != nil {
		return fmt.Errorf("%w: timestamp: %v", ErrBatch, err)
	}
	ne, err := r.arrayLen()
	if err != nil {
		return fmt.Errorf("%w: events: %v", ErrBatch, err)
	}
	for range ne {
		start := r.p
		var ev Event
		err := b.decodeEvent(&r, &ev)
		if err == nil {
			b.Events = append(b.Events, ev)
			continue
		}
		// Resynchronise on the event's extent: a bad field costs only this
		// event, unless the bytes themselves run out.
		r.p = start
		if serr := r.skip(); serr != nil {
			b.skipped(err)
			return fmt.Errorf("%w: event %d: %v", ErrBatch, len(b.Events)+b.Malformed+b.Unknown, serr)
		}
		b.skipped(err)
	}
	if n >= 3 {
		if !r.nilNext() {
			v, _, err := r.integer()
			if err != nil {
				return fmt.Errorf("%w: data_parallel_rank: %v", ErrBatch, err)
			}
			b.DPRank, b.HasDPRank = int64(v), true
		}
		for range n - 3 { // newer publishers may append fields
			if err := r.skip(); err != nil {
				return fmt.Errorf("%w: trailing field: %v", ErrBatch, err)
			}
		}
	}
	return nil
}

func (b *Batch) skipped(err error) {
	if errors.Is(err, errUnknownType) || errors.Is(err, errUnknownMedium) {
		b.Unknown++
	} else {
		b.Malformed++
	}
	if b.FirstErr == nil {
		b.FirstErr = err
	}
}

// field names, positional order of BlockStored after the tag.
const (
	fHashes = iota + 1
	fParent
	fTokens
	fBlockSize
	fLoraID
	fMedium
	fLoraName // vLLM lora_name; SGLang salted stores put a metadata map here
	fExtraKeys
	fGroup
	fSpecKind
	fSlidingWindow
	fSessionID // map encoding only
	fCacheSalt // map encoding only (SGLang)
	fSkip
)

// removedFields maps BlockRemoved's positional fields onto the same ids.
var removedFields = [...]int{1: fHashes, 2: fMedium, 3: fGroup}

func fieldByName(name []byte) int {
	switch string(name) {
	case "block_hashes":
		return fHashes
	case "parent_block_hash":
		return fParent
	case "token_ids":
		return fTokens
	case "block_size":
		return fBlockSize
	case "lora_id":
		return fLoraID
	case "medium":
		return fMedium
	case "lora_name":
		return fLoraName
	case "extra_keys":
		return fExtraKeys
	case "group_idx":
		return fGroup
	case "kv_cache_spec_kind":
		return fSpecKind
	case "kv_cache_spec_sliding_window":
		return fSlidingWindow
	case "session_id":
		return fSessionID
	case "cache_salt":
		return fCacheSalt
	case "metadata":
		return fLoraName // a metadata map under a name: treated like SGLang's slot 7
	}
	return fSkip
}

func typeByName(name []byte) (Type, error) {
	switch string(name) {
	case "BlockStored":
		return BlockStored, nil
	case "BlockRemoved":
		return BlockRemoved, nil
	case "AllBlocksCleared":
		return AllBlocksCleared, nil
	}
	return 0, fmt.Errorf("%w %q", errUnknownType, name)
}

// extra holds the raw extra_keys so they can be read once the lora name
// (which may come later in a map) is known.
type extra struct {
	present bool
	r       reader
}

func (b *Batch) decodeEvent(r *reader, ev *Event) error {
	h0, t0 := len(b.hashes), len(b.tokens)
	var ex extra
	switch r.peek() {
	case mArray:
		n, err := r.arrayLen()
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("%w: empty event", errField)
		}
		tag, err := r.str()
		if err != nil {
			return fmt.Errorf("%w: tag: %v", errField, err)
		}
		if ev.Type, err = typeByName(tag); err != nil {
			return err
		}
		for i := 1; i < n; i++ {
			f := fSkip
			switch ev.Type {
			case BlockStored:
				if i <= fSlidingWindow {
					f = i
				}
			case BlockRemoved:
				if i < len(removedFields) {
					f = removedFields[i]
				}
			}
			if err := b.decodeField(r, ev, f, &ex); err != nil {
				return err
			}
		}
	case mMap:
		n, err := r.mapLen()
		if err != nil {
			return err
		}
		for range n {
			key, err := r.str()
			if err != nil {
				return fmt.Errorf("%w: map key: %v", errField, err)
			}
			if string(key) == "type" {
				tag, err := r.str()
				if err != nil {
					return fmt.Errorf("%w: type: %v", errField, err)
				}
				if ev.Type, err = typeByName(tag); err != nil {
					return err
				}
				continue
			}
			if err := b.decodeField(r, ev, fieldByName(key), &ex); err != nil {
				return err
			}
		}
		if ev.Type == 0 {
			return fmt.Errorf("%w: map event without a type", errField)
		}
	default:
		return fmt.Errorf("%w: event is neither array nor map", errField)
	}
	ev.Hashes = b.hashes[h0:len(b.hashes):len(b.hashes)]
	ev.Tokens = b.tokens[t0:len(b.tokens):len(b.tokens)]
	if ex.present && ev.Type == BlockStored {
		if err := ev.readExtraKeys(&ex.r); err != nil {
			return err
		}
	}
	switch ev.Type {
	case AllBlocksCleared:
		ev.Hashes, ev.Tokens = nil, nil
	case BlockRemoved:
		ev.Tokens = nil
		if len(ev.Hashes) == 0 {
			return fmt.Errorf("%w: BlockRemoved without hashes", errField)
		}
	case BlockStored:
		if len(ev.Hashes) == 0 {
			return fmt.Errorf("%w: BlockStored without hashes", errField)
		}
		if len(ev.Tokens) > 0 {
			bs := ev.BlockSize
			if bs <= 0 {
				if len(ev.Tokens)%len(ev.Hashes) != 0 {
					return fmt.Errorf("%w: %d tokens for %d blocks", errField, len(ev.Tokens), len(ev.Hashes))
				}
				bs = len(ev.Tokens) / len(ev.Hashes)
				ev.BlockSize = bs
			}
			if len(ev.Tokens) != bs*len(ev.Hashes) {
				return fmt.Errorf("%w: %d tokens for %d blocks of %d", errField, len(ev.Tokens), len(ev.Hashes), bs)
			}
		}
	}
	return nil
}

func (b *Batch) decodeField(r *reader, ev *Event, f int, ex *extra) error {
	if f == fSkip {
		return r.skip()
	}
	if r.nilNext() {
		return nil // nil is every optional field's default
	}
	var err error
	switch f {
	case fHashes:
		var n int
		if n, err = r.arrayLen(); err != nil {
			break
		}
		for range n {
			var h uint64
			if h, err = readHash(r); err != nil {
				break
			}
			b.hashes = append(b.hashes, h)
		}
	case fParent:
		ev.Parent, err = readHash(r)
		ev.HasParent = err == nil
	case fTokens:
		var n int
		if n, err = r.arrayLen(); err != nil {
			break
		}
		b.tokens = growTokens(b.tokens, n)
		for range n {
			// Fast paths for the unsigned forms token ids take.
			if p := r.p; p < len(r.b) {
				switch c := r.b[p]; {
				case c <= 0x7f:
					b.tokens = append(b.tokens, uint32(c))
					r.p++
					continue
				case c == 0xcd && p+3 <= len(r.b):
					b.tokens = append(b.tokens, uint32(binary.BigEndian.Uint16(r.b[p+1:])))
					r.p += 3
					continue
				case c == 0xce && p+5 <= len(r.b):
					b.tokens = append(b.tokens, binary.BigEndian.Uint32(r.b[p+1:]))
					r.p += 5
					continue
				}
			}
			var v uint64
			var neg bool
			if v, neg, err = r.integer(); err != nil {
				break
			}
			if neg || v > 1<<32-1 {
				err = fmt.Errorf("token id %d out of range", int64(v))
				break
			}
			b.tokens = append(b.tokens, uint32(v))
		}
	case fBlockSize:
		var v uint64
		var neg bool
		if v, neg, err = r.integer(); err == nil && (neg || v == 0 || v > 1<<20) {
			err = fmt.Errorf("block size %d out of range", int64(v))
		}
		ev.BlockSize = int(v)
	case fLoraID:
		var v uint64
		v, _, err = r.integer()
		ev.LoraID, ev.HasLoraID = int64(v), err == nil
	case fMedium:
		var s []byte
		if s, err = r.str(); err == nil {
			var ok bool
			if ev.Tier, ok = TierOf(s); !ok {
				return fmt.Errorf("%w %q", errUnknownMedium, s)
			}
		}
	case fLoraName:
		switch r.peek() {
		case mStr:
			var s []byte
			if s, err = r.str(); err == nil {
				ev.LoraName = string(s)
			}
		case mMap: // SGLang's salted-store metadata
			err = readMetadata(r, ev)
		default:
			err = errType
		}
	case fExtraKeys:
		start := r.p
		if err = r.skip(); err == nil {
			ex.present = true
			ex.r = reader{b: r.b[start:r.p]}
		}
	case fGroup:
		var v uint64
		v, _, err = r.integer()
		ev.Group = int64(v)
	case fSpecKind:
		var s []byte
		if s, err = r.str(); err == nil {
			ev.SpecKind = string(s)
		}
	case fSessionID:
		var s []byte
		if s, err = r.str(); err == nil {
			ev.SessionID = string(s)
		}
	case fCacheSalt:
		var s []byte
		if s, err = r.str(); err == nil {
			ev.CacheSalt = string(s)
		}
	default: // fSlidingWindow and anything else we do not use
		err = r.skip()
	}
	if err != nil {
		return fmt.Errorf("%w %d: %v", errField, f, err)
	}
	return nil
}

func growTokens(v []uint32, n int) []uint32 {
	if cap(v)-len(v) < n {
		g := make([]uint32, len(v), 2*cap(v)+n)
		copy(g, v)
		return g
	}
	return v
}

// readHash reads an ExternalBlockHash: an integer, or bytes whose last 8 are
// the big-endian value vLLM's integer form would have published.
func readHash(r *reader) (uint64, error) {
	switch r.peek() {
	case mInt:
		v, _, err := r.integer()
		return v, err
	case mBin, mStr:
		var s []byte
		var err error
		if r.peek() == mBin {
			s, err = r.bin()
		} else {
			s, err = r.str()
		}
		if err != nil {
			return 0, err
		}
		if len(s) == 0 {
			return 0, errors.New("empty hash")
		}
		if len(s) >= 8 {
			return binary.BigEndian.Uint64(s[len(s)-8:]), nil
		}
		var v uint64
		for _, c := range s {
			v = v<<8 | uint64(c)
		}
		return v, nil
	}
	return 0, errType
}

// readMetadata reads SGLang's metadata map ({"cache_salt": …, …}).
func readMetadata(r *reader, ev *Event) error {
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	for range n {
		k, err := r.str()
		if err != nil {
			return err
		}
		var dst *string
		switch string(k) {
		case "cache_salt":
			dst = &ev.CacheSalt
		case "session_id":
			dst = &ev.SessionID
		case "lora_name":
			dst = &ev.LoraName
		default:
			if err := r.skip(); err != nil {
				return err
			}
			continue
		}
		if r.nilNext() {
			continue
		}
		s, err := r.str()
		if err != nil {
			return err
		}
		*dst = string(s)
	}
	return nil
}

// readExtraKeys interprets vLLM's per-block extra keys. Each entry is nil or
// a tuple of, in order: LoRA name, multimodal identifiers (bare strings or
// [identifier, offset] pairs), the cache salt (first block of a request
// only), a prompt-embeddings hash. Typed entries ({"type": "cache_salt",
// "value": …} and friends, from an unmerged proposal) are tolerated.
//
// A bare string cannot say whether it is a multimodal identifier or a salt;
// in the request's first block the last bare string that is not the LoRA
// name is taken as the salt. Misreading an identifier as a salt only gives
// the blocks a seed no lookup produces (a miss, never a false hit).
func (ev *Event) readExtraKeys(r *reader) error {
	n, err := r.arrayLen()
	if err != nil {
		return fmt.Errorf("%w: extra_keys: %v", errField, err)
	}
	for i := range n {
		if r.nilNext() {
			continue
		}
		m, err := r.arrayLen()
		if err != nil {
			return fmt.Errorf("%w: extra_keys[%d]: %v", errField, i, err)
		}
		var salt []byte
		bare := 0
		for j := range m {
			switch r.peek() {
			case mStr:
				s, err := r.str()
				if err != nil {
					return err
				}
				if j == 0 && ev.LoraName != "" && string(s) == ev.LoraName {
					continue
				}
				if salt != nil {
					bare++ // the previous candidate was an identifier
				}
				salt = s
			case mMap:
				kind, val, err := readTypedKey(r)
				if err != nil {
					return err
				}
				switch kind {
				case "cache_salt":
					if i == 0 && !ev.HasParent && ev.CacheSalt == "" {
						ev.CacheSalt = val
					}
				case "lora":
				default:
					ev.Opaque = true
				}
			case mNil:
				r.p++
			default: // [identifier, offset] pairs, embedding hashes
				if err := r.skip(); err != nil {
					return err
				}
				ev.Opaque = true
			}
		}
		if i == 0 && !ev.HasParent && salt != nil {
			if ev.CacheSalt == "" {
				ev.CacheSalt = string(salt)
			}
		} else if salt != nil {
			bare++
		}
		if bare > 0 {
			ev.Opaque = true
		}
	}
	return nil
}

// readTypedKey reads a typed extra key: {"type"|"kind": name, "value": v}.
func readTypedKey(r *reader) (kind, value string, err error) {
	n, err := r.mapLen()
	if err != nil {
		return "", "", err
	}
	for range n {
		k, err := r.str()
		if err != nil {
			return "", "", err
		}
		switch string(k) {
		case "type", "kind", "tag":
			s, err := r.str()
			if err != nil {
				return "", "", err
			}
			kind = string(s)
			continue
		case "value", "salt", "cache_salt":
			if r.peek() == mStr {
				s, err := r.str()
				if err != nil {
					return "", "", err
				}
				value = string(s)
				continue
			}
		}
		if err := r.skip(); err != nil {
			return "", "", err
		}
	}
	return kind, value, nil
}
