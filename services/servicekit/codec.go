package servicekit

import (
	"fmt"
	"math/bits"
	"sync"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// Every Switchyard process encodes gRPC messages with this codec, registered
// as "proto" in place of grpc-go's: the same wire, and the same pooling of
// large buffers, but from a pool that does not clear a buffer before handing
// it out. grpc-go's pools clear every buffer they reuse, whole (a 1 MiB
// buffer for a 450 KB message), so that no code reads another's stale
// bytes; the buffers here are always written in full before they are read
// (a message is marshalled from the buffer's first byte to its last, a
// received one copied in; the transport reads frames with io.ReadFull), so
// the clearing buys nothing. In a 100k-token agent turn it was a tenth of the
// frontend's and the scheduler's CPU (docs/benchmarks.md, "The whole path").
// grpc-go keeps its own non-clearing pools internal (grpc/grpc-go#8790).

func init() { encoding.RegisterCodecV2(codec{}) }

// wirePool is the buffer pool of the codec and of every server's and client's
// transport (servicekit.New, Dial).
var wirePool mem.BufferPool = newDirtyPool(8, 12, 14, 15, 20)

type codec struct{}

func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	m := messageOf(v)
	if m == nil {
		return nil, fmt.Errorf("proto: cannot marshal %T, not a proto.Message", v)
	}
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true} // the Size just computed
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := wirePool.Get(size)
	b, err := opts.MarshalAppend((*buf)[:0], m)
	if err != nil {
		wirePool.Put(buf)
		return nil, err
	}
	if len(b) != size {
		// The message changed under us (a caller's bug): send what was
		// written, never a pooled buffer's unwritten tail, and give the
		// buffer back only when b does not point into it (it was grown
		// elsewhere); else the garbage collector takes it once sent.
		if len(b) == 0 || cap(*buf) == 0 || &b[0] != &(*buf)[:1][0] {
			wirePool.Put(buf)
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return mem.BufferSlice{mem.NewBuffer(buf, wirePool)}, nil
}

// Frame is a received message kept as its wire bytes, for a decoder of its
// own (kvwire.BatchDecoder): the codec copies them into B, reusing its
// array from one message to the next. An array past 64 KiB that sixteen
// messages in a row used less than a quarter of is given up, so that a
// stream does not keep its largest message's room for ever, nor reallocate
// when its sizes alternate.
type Frame struct {
	B     []byte
	small int // messages in a row that used less than a quarter of B's array
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	if f, ok := v.(*Frame); ok {
		n := data.Len()
		if cap(f.B) > 64<<10 && cap(f.B) > 4*n {
			f.small++
		} else {
			f.small = 0
		}
		if cap(f.B) < n || f.small >= 16 {
			f.B, f.small = make([]byte, n), 0
		}
		f.B = f.B[:n]
		data.CopyTo(f.B)
		return nil
	}
	m := messageOf(v)
	if m == nil {
		return fmt.Errorf("proto: cannot unmarshal into %T, not a proto.Message", v)
	}
	buf := data.MaterializeToBuffer(wirePool) // copies every byte in
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m) // copies out what it keeps
}

func messageOf(v any) proto.Message {
	switch v := v.(type) {
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(v)
	case protoadapt.MessageV2:
		return v
	}
	return nil
}

// dirtyPool hands out buffers from power-of-two tiers without clearing them;
// a request past the largest tier gets a buffer of its own.
type dirtyPool struct {
	tiers []dirtyTier // by size, ascending
}

type dirtyTier struct {
	size int
	pool *sync.Pool // of *[]byte of capacity size
}

func newDirtyPool(exponents ...uint) *dirtyPool {
	p := &dirtyPool{}
	for _, e := range exponents {
		size := 1 << e
		p.tiers = append(p.tiers, dirtyTier{size: size, pool: &sync.Pool{New: func() any {
			b := make([]byte, size)
			return &b
		}}})
	}
	return p
}

// tier is the smallest tier holding n bytes, or -1.
func (p *dirtyPool) tier(n int) int {
	if n <= 0 {
		return 0
	}
	want := 1 << bits.Len(uint(n-1)) // n rounded up to a power of two
	for i, t := range p.tiers {
		if t.size >= want {
			return i
		}
	}
	return -1
}

func (p *dirtyPool) Get(n int) *[]byte {
	i := p.tier(n)
	if i < 0 {
		b := make([]byte, n)
		return &b
	}
	buf := p.tiers[i].pool.Get().(*[]byte)
	*buf = (*buf)[:n]
	return buf
}

// Put takes back a buffer Get gave out (its capacity names its tier); any
// other is left to the garbage collector.
func (p *dirtyPool) Put(buf *[]byte) {
	c := cap(*buf)
	for _, t := range p.tiers {
		if t.size == c {
			*buf = (*buf)[:c]
			t.pool.Put(buf)
			return
		}
	}
}
