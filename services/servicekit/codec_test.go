package servicekit

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"unsafe"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
)

func TestCodecIsRegistered(t *testing.T) {
	if _, ok := encoding.GetCodecV2("proto").(codec); !ok {
		t.Fatalf("the proto codec is %T, not servicekit's", encoding.GetCodecV2("proto"))
	}
}

func promptRequest(r *rand.Rand, tokens int) *enginev1.GenerateRequest {
	req := &enginev1.GenerateRequest{RequestId: "r", TokenIds: make([]uint32, tokens), BlockHashes: make([]uint64, tokens/16)}
	for i := range req.TokenIds {
		req.TokenIds[i] = r.Uint32()
	}
	for i := range req.BlockHashes {
		req.BlockHashes[i] = r.Uint64()
	}
	return req
}

// Differential against proto.Marshal over sizes on both sides of the pooling
// threshold, each buffer handed back and reused dirty by the next (larger
// messages first, so a reused buffer holds stale bytes past the next one's
// end), and every message decoded back, from one buffer and from many.
func TestCodecMatchesProtoWithDirtyBuffers(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	c := codec{}
	for _, tokens := range []int{100_000, 60_000, 20_000, 4_000, 300, 10, 0, 100_000} {
		want := promptRequest(r, tokens)
		raw, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		data, err := c.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if got := data.Materialize(); !bytes.Equal(got, raw) {
			t.Fatalf("%d tokens: %d bytes differ from proto.Marshal's %d", tokens, len(got), len(raw))
		}
		data.Free()
		// As the transport hands a message over: in frames.
		var frames mem.BufferSlice
		for off := 0; off < len(raw); off += 16 << 10 {
			frames = append(frames, mem.SliceBuffer(raw[off:min(off+16<<10, len(raw))]))
		}
		var got enginev1.GenerateRequest
		if err := c.Unmarshal(frames, &got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&got, want) {
			t.Fatalf("%d tokens: decoded message differs", tokens)
		}
	}
}

// A Frame gets the message's bytes as they came, in frames or not, in the
// array it had while that is large enough, and gives up a large array only
// after sixteen messages in a row used little of it.
func TestCodecFrameKeepsTheWireBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	wire := map[int][]byte{}
	for _, tokens := range []int{100_000, 20_000, 300} {
		raw, err := proto.Marshal(promptRequest(r, tokens))
		if err != nil {
			t.Fatal(err)
		}
		wire[tokens] = raw
	}
	var f Frame
	receive := func(tokens int) *byte {
		t.Helper()
		raw := wire[tokens]
		var frames mem.BufferSlice
		for off := 0; off < len(raw); off += 16 << 10 {
			frames = append(frames, mem.SliceBuffer(raw[off:min(off+16<<10, len(raw))]))
		}
		if err := (codec{}).Unmarshal(frames, &f); err != nil || !bytes.Equal(f.B, raw) {
			t.Fatalf("%d tokens: %v, %d bytes of %d", tokens, err, len(f.B), len(raw))
		}
		return unsafe.SliceData(f.B[:cap(f.B)])
	}
	big := receive(100_000)
	// Sizes alternating around a quarter of the array keep it.
	for range 40 {
		if receive(20_000) != big || receive(100_000) != big {
			t.Fatal("alternating sizes reallocated the array")
		}
	}
	for i := range 15 {
		if receive(300) != big {
			t.Fatalf("the array given up after %d small messages, want 16", i+1)
		}
	}
	if receive(300); cap(f.B) > 64<<10 {
		t.Errorf("after sixteen small messages the array is still %d bytes", cap(f.B))
	}
}

func TestCodecRefusesOtherTypes(t *testing.T) {
	if _, err := (codec{}).Marshal("not a message"); err == nil {
		t.Error("Marshal of a string did not fail")
	}
	if err := (codec{}).Unmarshal(nil, new(int)); err == nil {
		t.Error("Unmarshal into an int did not fail")
	}
}

func TestDirtyPoolTiers(t *testing.T) {
	p := newDirtyPool(8, 12)
	for _, tc := range []struct{ n, cap int }{{0, 256}, {1, 256}, {256, 256}, {257, 4096}, {4096, 4096}, {4097, 4097}} {
		b := p.Get(tc.n)
		if len(*b) != tc.n || cap(*b) != tc.cap {
			t.Errorf("Get(%d): len %d cap %d, want cap %d", tc.n, len(*b), cap(*b), tc.cap)
		}
		p.Put(b)
	}
	// A buffer of no tier's size is not pooled (Get never hands it out).
	odd := make([]byte, 300)
	p.Put(&odd)
	if b := p.Get(300); cap(*b) != 4096 {
		t.Errorf("Get(300) after a foreign Put: cap %d, want the 4096 tier's", cap(*b))
	}
}

// FuzzCodecUnmarshal: every message a peer sends is decoded by the codec,
// which must read what proto.Unmarshal reads from the same bytes, however the
// transport split them into frames and whatever a pooled buffer held
// before, and hand a Frame the bytes as they came.
func FuzzCodecUnmarshal(f *testing.F) {
	raw, _ := proto.Marshal(promptRequest(rand.New(rand.NewPCG(5, 6)), 40))
	f.Add(raw, uint16(7))
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}, uint16(1)) // a length past the end
	f.Add([]byte{}, uint16(0))
	var frame Frame // reused across inputs, as a stream reuses it
	f.Fuzz(func(t *testing.T, b []byte, split uint16) {
		var frames mem.BufferSlice
		step := int(split)%64 + 1
		for off := 0; off < len(b); off += step {
			frames = append(frames, mem.SliceBuffer(b[off:min(off+step, len(b))]))
		}
		var want, got enginev1.GenerateRequest
		wantErr := proto.Unmarshal(b, &want)
		gotErr := (codec{}).Unmarshal(frames, &got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("codec: %v; proto.Unmarshal: %v", gotErr, wantErr)
		}
		if wantErr == nil && !proto.Equal(&got, &want) {
			t.Fatal("the codec decoded another message than proto.Unmarshal")
		}
		if err := (codec{}).Unmarshal(frames, &frame); err != nil || !bytes.Equal(frame.B, b) {
			t.Fatalf("Frame: %v, %d bytes of %d", err, len(frame.B), len(b))
		}
	})
}
