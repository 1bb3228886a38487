package protofake

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// zmq4 v0.17.0 never stops a PUB socket's writer goroutine
	// (socket.Close does not close its pubMWriter).
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
}

// The replay socket answers exactly as go-peers.md §6.4 describes, in both
// layouts: [identity, "", (topic,) seq, payload] per buffered batch, then
// the end marker.
func TestReplayLayouts(t *testing.T) {
	for _, two := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		e, err := Start(ctx, Config{Engine: VLLM, Topic: "kv@pod@m", TwoFrameReplay: two})
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := e.Clear(); err != nil {
				t.Fatal(err)
			}
		}
		d := zmq4.NewDealer(ctx, zmq4.WithTimeout(5*time.Second))
		if err := d.Dial(e.ReplayEndpoint()); err != nil {
			t.Fatal(err)
		}
		start := make([]byte, 8)
		binary.BigEndian.PutUint64(start, 1)
		if err := d.SendMulti(zmq4.NewMsgFrom([]byte{}, start)); err != nil {
			t.Fatal(err)
		}
		var seqs []uint64
		for {
			m, err := d.Recv()
			if err != nil {
				t.Fatal(err)
			}
			f := m.Frames
			want := 4
			if two {
				want = 3
			}
			if len(f) != want || len(f[0]) != 0 {
				t.Fatalf("two=%v: frames %q", two, f)
			}
			if !two && string(f[1]) != "kv@pod@m" && len(f[3]) > 0 {
				t.Fatalf("topic frame %q", f[1])
			}
			seq := binary.BigEndian.Uint64(f[len(f)-2])
			if seq == endSeq {
				if len(f[len(f)-1]) != 0 {
					t.Fatal("end marker with a payload")
				}
				break
			}
			var batch []any
			if err := msgpack.Unmarshal(f[len(f)-1], &batch); err != nil || len(batch) != 3 {
				t.Fatalf("batch %v %v", batch, err)
			}
			seqs = append(seqs, seq)
		}
		if len(seqs) != 2 || seqs[0] != 1 || seqs[1] != 2 {
			t.Fatalf("two=%v: replayed %v, want [1 2]", two, seqs)
		}
		d.Close()
		e.Close()
		cancel()
	}
}
