package kvwire

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	"switchyard.dev/pkg/kv"
)

// BatchDecoder decodes KV event batches from their wire bytes into storage
// it reuses. A follower applies each batch and is done with it, while
// decoding through the generated messages allocated, per event, the
// message, its oneof wrapper, the stored or removed message, its hash list,
// its session id, and then the converted event and a copy of its hashes:
// under an agent fleet's load that was most of the indexers' garbage.
//
// It reads exactly what proto.Unmarshal followed by EventsFromProto reads:
// the same events (an event of a kind newer than this build skipped), the
// same errors for malformed input (invalid UTF-8 in a string field
// included), unknown fields and fields of an unexpected wire type skipped,
// a repeated message field merged as protobuf merges it (FuzzBatchDecoder
// holds it to that). Its storage grows to the largest batch it decoded (a
// shim's step, a few hundred events at most in practice) and stays. A
// BatchDecoder is not safe for concurrent use.
type BatchDecoder struct {
	events []kv.Event
	hashes []kv.BlockHash
	// sessions interns session ids: an id's bytes are looked up without a
	// copy, and a session's events share one string.
	sessions map[string]string
}

// Batch is a decoded batch. Events and their Blocks stay valid until the
// decoder's next call.
type Batch struct {
	Epoch, Sequence uint64
	Events          []kv.Event
}

// internedSessions bounds the interned ids; past it the table starts again.
const internedSessions = 4096

var errMalformed = errors.New("kvwire: truncated or malformed batch")

// Response field numbers of engine.v1.SubscribeKvEventsResponse, and of the
// messages inside it (switchyard.kv.v1).
const (
	respBatch = 1

	batchWorkerID = 1
	batchEpoch    = 2
	batchSequence = 3
	batchEvents   = 4
	batchTime     = 5

	eventStored    = 1
	eventRemoved   = 2
	eventCleared   = 3
	eventTier      = 4
	eventDPRank    = 5
	eventSessionID = 6

	storedParent = 1
	storedHashes = 2
	removedHash  = 1
)

// DecodeResponse decodes an engine.v1.SubscribeKvEventsResponse: the batch
// it carries (an empty one when it carries none).
func (d *BatchDecoder) DecodeResponse(b []byte) (Batch, error) {
	d.reset()
	var out Batch
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num == respBatch && typ == protowire.BytesType {
			return d.batch(v, &out)
		}
		return nil
	})
	if err != nil {
		return Batch{}, err
	}
	out.Events = d.events
	return out, nil
}

func (d *BatchDecoder) reset() {
	d.events, d.hashes = d.events[:0], d.hashes[:0]
	if d.sessions == nil || len(d.sessions) > internedSessions {
		d.sessions = map[string]string{}
	}
}

// batch merges one KvEventBatch's fields into out and d.events.
func (d *BatchDecoder) batch(b []byte, out *Batch) error {
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == batchWorkerID && typ == protowire.BytesType:
			return validString(v)
		case num == batchEpoch && typ == protowire.VarintType:
			out.Epoch = x
		case num == batchSequence && typ == protowire.VarintType:
			out.Sequence = x
		case num == batchEvents && typ == protowire.BytesType:
			return d.event(v)
		case num == batchTime && typ == protowire.BytesType:
			return validMessage(v) // a Timestamp: nothing here reads it
		}
		return nil
	})
}

// event decodes one KvEvent onto d.events (nothing for an event without a
// payload of a kind this build knows).
func (d *BatchDecoder) event(b []byte) error {
	var (
		ev   kv.Event
		kind protowire.Number // the oneof's field, 0 = none yet
		from = len(d.hashes)  // the event's hashes are d.hashes[from:]
	)
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case (num == eventStored || num == eventRemoved || num == eventCleared) && typ == protowire.BytesType:
			if kind != num {
				// Another member of the oneof replaces the one before; the
				// same one again merges into it.
				kind, ev.Parent, d.hashes = num, 0, d.hashes[:from]
			}
			return d.payload(num, v, &ev)
		case num == eventTier && typ == protowire.VarintType:
			ev.Tier = TierFromProto(kvv1.Tier(int32(x)))
		case num == eventDPRank && typ == protowire.VarintType:
			ev.DPRank = uint32(x)
		case num == eventSessionID && typ == protowire.BytesType:
			if err := validString(v); err != nil {
				return err
			}
			ev.SessionID = d.session(v)
		}
		return nil
	})
	if err != nil {
		return err
	}
	switch kind {
	case eventStored:
		ev.Kind = kv.Stored
	case eventRemoved:
		ev.Kind = kv.Removed
	case eventCleared:
		ev.Kind = kv.Cleared
	default:
		d.hashes = d.hashes[:from]
		return nil // no payload: a kind newer than this build
	}
	if len(d.hashes) > from {
		ev.Blocks = d.hashes[from:len(d.hashes):len(d.hashes)]
	}
	d.events = append(d.events, ev)
	return nil
}

// payload decodes a BlocksStored, BlocksRemoved or AllBlocksCleared into ev
// and d.hashes.
func (d *BatchDecoder) payload(kind protowire.Number, b []byte, ev *kv.Event) error {
	hashField := protowire.Number(storedHashes)
	switch kind {
	case eventRemoved:
		hashField = removedHash
	case eventCleared:
		return validMessage(b)
	}
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case kind == eventStored && num == storedParent && typ == protowire.VarintType:
			ev.Parent = kv.BlockHash(x)
		case num == hashField && typ == protowire.Fixed64Type:
			d.hashes = append(d.hashes, kv.BlockHash(x))
		case num == hashField && typ == protowire.BytesType: // packed
			if len(v)%8 != 0 {
				return errMalformed
			}
			for ; len(v) > 0; v = v[8:] {
				h, _ := protowire.ConsumeFixed64(v)
				d.hashes = append(d.hashes, kv.BlockHash(h))
			}
		}
		return nil
	})
}

// session is id as a string, shared with every earlier event of the
// session (the map lookup of string(id) does not copy).
func (d *BatchDecoder) session(id []byte) string {
	if len(id) == 0 {
		return ""
	}
	if s, ok := d.sessions[string(id)]; ok {
		return s
	}
	s := string(id)
	d.sessions[s] = s
	return s
}

// eachField calls f with every field of the message in b, in order: its
// number and wire type, and its value (v for a length-delimited one, x for
// a varint or fixed one; a group's fields are skipped whole).
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", errMalformed, protowire.ParseError(n))
		}
		if !num.IsValid() { // ConsumeTag checks the least number only
			return fmt.Errorf("%w: field number %d", errMalformed, num)
		}
		b = b[n:]
		var (
			v []byte
			x uint64
		)
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var x32 uint32
			x32, n = protowire.ConsumeFixed32(b)
			x = uint64(x32)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("%w: %v", errMalformed, protowire.ParseError(n))
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

// validMessage checks that b is a well-formed message whose fields nothing
// here reads, as proto.Unmarshal would.
func validMessage(b []byte) error {
	return eachField(b, func(protowire.Number, protowire.Type, []byte, uint64) error { return nil })
}

func validString(b []byte) error {
	if !utf8.Valid(b) {
		return errors.New("kvwire: string field contains invalid UTF-8")
	}
	return nil
}
