package kvwire

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	"switchyard.dev/pkg/kv"
)

// reference is what the follower did before BatchDecoder: the generated
// message, then EventsFromProto.
func reference(b []byte) (Batch, error) {
	var resp enginev1.SubscribeKvEventsResponse
	if err := proto.Unmarshal(b, &resp); err != nil {
		return Batch{}, err
	}
	bt := resp.GetBatch()
	return Batch{Epoch: bt.GetEpoch(), Sequence: bt.GetSequence(), Events: EventsFromProto(bt.GetEvents())}, nil
}

// sameAsReference fails t unless d decodes b as reference does: both fail,
// or both give the same batch.
func sameAsReference(t *testing.T, d *BatchDecoder, b []byte) {
	t.Helper()
	want, werr := reference(b)
	got, gerr := d.DecodeResponse(b)
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("decoding %x: proto.Unmarshal says %v, BatchDecoder %v", b, werr, gerr)
	}
	if werr != nil {
		return
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("decoding %x (-proto.Unmarshal +BatchDecoder):\n%s", b, diff)
	}
}

func randomEvent(rng *rand.Rand) *kvv1.KvEvent {
	hashes := func() []uint64 {
		out := make([]uint64, rng.IntN(5))
		for i := range out {
			out[i] = rng.Uint64() >> rng.IntN(64)
		}
		return out
	}
	e := &kvv1.KvEvent{Tier: kvv1.Tier(rng.IntN(7) - 1), DpRank: uint32(rng.IntN(3))}
	if rng.IntN(2) == 0 {
		e.SessionId = []string{"s1", "s2", "a session", "é"}[rng.IntN(4)]
	}
	switch rng.IntN(5) {
	case 0:
		e.Event = &kvv1.KvEvent_Stored{Stored: &kvv1.BlocksStored{ParentHash: rng.Uint64() >> rng.IntN(64), BlockHashes: hashes()}}
	case 1:
		e.Event = &kvv1.KvEvent_Removed{Removed: &kvv1.BlocksRemoved{BlockHashes: hashes()}}
	case 2:
		e.Event = &kvv1.KvEvent_Cleared{Cleared: &kvv1.AllBlocksCleared{}}
	case 3:
		e.Event = &kvv1.KvEvent_Stored{Stored: &kvv1.BlocksStored{}}
	} // 4: no payload, a kind newer than this build
	return e
}

func randomResponse(rng *rand.Rand) []byte {
	bt := &kvv1.KvEventBatch{WorkerId: "w1", Epoch: rng.Uint64() >> rng.IntN(64), Sequence: uint64(rng.IntN(1000))}
	for range rng.IntN(6) {
		bt.Events = append(bt.Events, randomEvent(rng))
	}
	if rng.IntN(2) == 0 {
		bt.Time = timestamppb.New(t0)
	}
	b, err := proto.Marshal(&enginev1.SubscribeKvEventsResponse{Batch: bt})
	if err != nil {
		panic(err)
	}
	return b
}

// Hand-made encodings the generated marshaller never writes, which
// proto.Unmarshal still reads: unpacked hashes, a oneof member twice
// (merged) or two members (the last wins), a batch field twice (merged),
// wrong wire types (skipped), invalid UTF-8 (refused), truncations.
func handMade() [][]byte {
	tag := func(b []byte, num protowire.Number, typ protowire.Type) []byte {
		return protowire.AppendTag(b, num, typ)
	}
	bytesField := func(b []byte, num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(tag(b, num, protowire.BytesType), v)
	}
	varint := func(b []byte, num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(tag(b, num, protowire.VarintType), v)
	}
	fixed := func(b []byte, num protowire.Number, v uint64) []byte {
		return protowire.AppendFixed64(tag(b, num, protowire.Fixed64Type), v)
	}
	var unpacked []byte // BlocksStored: parent 5, hashes 6 and 7 unpacked
	unpacked = varint(unpacked, storedParent, 5)
	unpacked = fixed(unpacked, storedHashes, 6)
	unpacked = fixed(unpacked, storedHashes, 7)
	packed := bytesField(nil, storedHashes, protowire.AppendFixed64(protowire.AppendFixed64(nil, 8), 9))
	removed := bytesField(nil, removedHash, protowire.AppendFixed64(nil, 10))
	event := func(fields ...[]byte) []byte {
		var b []byte
		for _, f := range fields {
			b = append(b, f...)
		}
		return b
	}
	response := func(events ...[]byte) []byte {
		bt := varint(varint(nil, batchEpoch, 3), batchSequence, 4)
		for _, e := range events {
			bt = bytesField(bt, batchEvents, e)
		}
		return bytesField(nil, respBatch, bt)
	}
	merged := response(event(bytesField(nil, eventStored, unpacked), bytesField(nil, eventStored, packed), varint(nil, eventTier, 2)))
	return [][]byte{
		response(event(bytesField(nil, eventStored, unpacked))),
		merged,
		response(event(bytesField(nil, eventStored, unpacked), bytesField(nil, eventRemoved, removed))),
		response(event(bytesField(nil, eventRemoved, removed), bytesField(nil, eventStored, packed))),
		response(event(bytesField(nil, eventCleared, nil), bytesField(nil, eventSessionID, []byte("s")))),
		append(response(event(bytesField(nil, eventCleared, nil))), response(event(bytesField(nil, eventStored, packed)))...),
		response(event(varint(nil, eventStored, 1), fixed(nil, eventTier, 1), bytesField(nil, eventDPRank, []byte{1}))),
		response(event(bytesField(nil, eventSessionID, []byte{0xff}), bytesField(nil, eventStored, packed))),
		bytesField(nil, respBatch, bytesField(nil, batchWorkerID, []byte{0xc3})),
		bytesField(nil, respBatch, bytesField(nil, batchTime, []byte{0x08})),
		response(event(bytesField(nil, eventStored, bytesField(nil, storedHashes, []byte{1, 2, 3})))),
		response(event(varint(nil, eventTier, 1<<40|1), varint(nil, eventDPRank, 1<<33|2), bytesField(nil, eventCleared, nil))),
		merged[:len(merged)-1],
		{0x0b, 0x0c}, // a group at the top
		{0x0c},       // an end group alone
		nil,
	}
}

var t0 = time.Unix(1_700_000_000, 0)

func TestBatchDecoderReadsWhatProtoReads(t *testing.T) {
	d := &BatchDecoder{}
	for _, b := range handMade() {
		sameAsReference(t, d, b)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		b := randomResponse(rng)
		sameAsReference(t, d, b)
		// And a damaged copy: a byte changed, or the end cut off.
		if len(b) > 0 {
			c := append([]byte(nil), b...)
			if rng.IntN(2) == 0 {
				c[rng.IntN(len(c))] = byte(rng.Uint32())
			} else {
				c = c[:rng.IntN(len(c))]
			}
			sameAsReference(t, d, c)
		}
	}
}

// The events of one batch may share a session id's string, and a batch's
// storage is reused by the next: what was decoded is valid until then.
func TestBatchDecoderReusesItsStorage(t *testing.T) {
	d := &BatchDecoder{}
	first := EventsToProto([]kv.Event{{Kind: kv.Stored, Blocks: []kv.BlockHash{1, 2}, SessionID: "s"}})
	b, _ := proto.Marshal(&enginev1.SubscribeKvEventsResponse{Batch: &kvv1.KvEventBatch{Events: first}})
	got, err := d.DecodeResponse(b)
	if err != nil || len(got.Events) != 1 {
		t.Fatal(got, err)
	}
	blocks := &got.Events[0].Blocks[0]
	if allocs := testing.AllocsPerRun(100, func() {
		if _, err := d.DecodeResponse(b); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("%v allocations per batch once warm, want 0", allocs)
	}
	again, _ := d.DecodeResponse(b)
	if &again.Events[0].Blocks[0] != blocks {
		t.Error("the second batch's hashes are in new storage")
	}
}

func FuzzBatchDecoder(f *testing.F) {
	for _, b := range handMade() {
		f.Add(b)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		f.Add(randomResponse(rng))
	}
	d := &BatchDecoder{}
	f.Fuzz(func(t *testing.T, b []byte) { sameAsReference(t, d, b) })
}

// BenchmarkDecodeBatch decodes a batch of 16 stored events of 8 blocks each
// (a busy step's), the generated way and with BatchDecoder.
func BenchmarkDecodeBatch(b *testing.B) {
	bt := &kvv1.KvEventBatch{WorkerId: "w1", Epoch: 1, Sequence: 99, Time: timestamppb.New(t0)}
	for i := range 16 {
		hashes := make([]uint64, 8)
		for j := range hashes {
			hashes[j] = uint64(i*8+j) * 0x9e3779b97f4a7c15
		}
		bt.Events = append(bt.Events, &kvv1.KvEvent{Tier: kvv1.Tier_TIER_DEVICE, SessionId: "session-" + string(rune('a'+i%4)),
			Event: &kvv1.KvEvent_Stored{Stored: &kvv1.BlocksStored{ParentHash: uint64(i), BlockHashes: hashes}}})
	}
	wire, err := proto.Marshal(&enginev1.SubscribeKvEventsResponse{Batch: bt})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("decoder=proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := reference(wire); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decoder=batch", func(b *testing.B) {
		b.ReportAllocs()
		d := &BatchDecoder{}
		for b.Loop() {
			if _, err := d.DecodeResponse(wire); err != nil {
				b.Fatal(err)
			}
		}
	})
}
