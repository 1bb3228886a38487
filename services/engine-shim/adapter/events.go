package adapter

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-zeromq/zmq4"

	"switchyard.dev/pkg/engineevents"
)

// endSeq marks the end of a replay (-1 as the publisher writes it).
const endSeq = ^uint64(0)

// rankState tracks one rank's sequence.
type rankState struct {
	rank int
	have bool // a batch of this rank was applied
	last uint64
	// lastLive is the newest sequence received live (hasLive once one was).
	hasLive  bool
	lastLive uint64
	batch    engineevents.Batch
}

// follow keeps a subscription to one rank's publisher until ctx is done.
func (b *Backend) follow(ctx context.Context, rank int) {
	st := &rankState{rank: rank}
	ep, _ := RankEndpoint(b.cfg.EventsEndpoint, rank) // validated in New
	log := b.log.With("rank", rank, "endpoint", ep)
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			b.stats.reconnects.Add(1)
		}
		err := b.subscribe(ctx, ep, st)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errIdle) {
			log.Debug("KV event publisher idle; reconnecting")
			continue // re-dial at once: finds a restarted publisher
		}
		log.Warn("KV event subscription failed; retrying", "err", err, "in", b.cfg.RetryWait)
		t := time.NewTimer(b.cfg.RetryWait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// subscribe runs one SUB connection until it fails or goes idle.
func (b *Backend) subscribe(ctx context.Context, ep string, st *rankState) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub := zmq4.NewSub(sctx, zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(b.cfg.RetryWait))
	defer sub.Close()
	var err error
	if bindHost(ep) {
		err = sub.Listen(ep)
	} else {
		err = sub.Dial(ep)
	}
	if err != nil {
		return err
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, b.cfg.Topic); err != nil {
		return err
	}
	msgs := make(chan zmq4.Msg, 64)
	errc := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := sub.Recv()
			if err != nil {
				errc <- err
				return
			}
			select {
			case msgs <- m:
			case <-sctx.Done():
				return
			}
		}
	}()
	defer func() { cancel(); sub.Close(); <-done }()
	idle := time.NewTimer(b.cfg.IdleReconnect)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return err
		case <-idle.C:
			return errIdle
		case m := <-msgs:
			idle.Reset(b.cfg.IdleReconnect)
			b.live(ctx, st, m.Frames)
		}
	}
}

// bindHost reports whether we bind (the engine's endpoint connects to us).
func bindHost(ep string) bool {
	return strings.Contains(ep, "://*:") || strings.Contains(ep, "://0.0.0.0:")
}

// live handles one published message: [topic, seq(8 BE), payload].
func (b *Backend) live(ctx context.Context, st *rankState, frames [][]byte) {
	if len(frames) != 3 || len(frames[1]) != 8 {
		b.stats.badFrames.Add(1)
		return
	}
	seq := binary.BigEndian.Uint64(frames[1])
	payload := frames[2]
	// A live sequence at or below the previous live one means the
	// publisher restarted (its numbering began again at 0) and lost its
	// cache and buffer. Sequences below what a replay already applied are
	// just live copies of replayed batches.
	if st.hasLive && seq <= st.lastLive {
		if seq == st.lastLive {
			b.stats.duplicates.Add(1)
			return
		}
		b.stats.restarts.Add(1)
		b.resync(st.rank, fmt.Sprintf("publisher restarted (sequence %d after %d)", seq, st.lastLive))
		st.have = false
	}
	st.hasLive, st.lastLive = true, seq
	switch {
	case !st.have:
		// Joined mid-stream (or after a restart): take whatever history
		// the publisher buffers, from 0, then this batch.
		if seq > 0 && b.cfg.ReplayEndpoint != "" {
			b.fill(ctx, st, 0, seq, false)
		}
	case seq <= st.last:
		b.stats.duplicates.Add(1) // already applied through a replay
		return
	case seq == st.last+1:
	default:
		b.stats.gaps.Add(1)
		b.fill(ctx, st, st.last+1, seq, true)
	}
	if !st.have || seq > st.last {
		b.applyPayload(st, seq, payload)
	} else {
		b.stats.duplicates.Add(1)
	}
}

// fill replays the rank's batches from `from` on through its ROUTER
// endpoint, ahead of the live batch `live` that called for it. When a gap
// (strict) cannot be filled, the rank is resynchronised. Only what follows
// the replay's last hole is applied (see lastHole).
func (b *Backend) fill(ctx context.Context, st *rankState, from, live uint64, strict bool) {
	if b.cfg.ReplayEndpoint == "" {
		if strict {
			b.stats.replayFailures.Add(1)
			b.resync(st.rank, "sequence gap and no replay endpoint")
		}
		return
	}
	got, err := b.replay(ctx, st.rank, from)
	got = beforeLive(got, live)
	start, hole := lastHole(got, from, live, strict)
	if err == nil {
		err = hole
	}
	if err != nil {
		b.stats.replayFailures.Add(1)
		if strict {
			b.resync(st.rank, "replay failed: "+err.Error())
		} else {
			b.log.Warn("KV event history replay failed", "rank", st.rank, "err", err)
		}
	} else if strict {
		b.stats.replays.Add(1)
	}
	for _, m := range got[start:] {
		if !st.have || m.seq > st.last {
			b.applyPayload(st, m.seq, m.payload)
		}
	}
}

// beforeLive is the part of a replay below the live batch that called for
// it: that batch is in hand, and those after it come on the live stream
// (one lost there opens a gap of its own), so none of them is a hole.
func beforeLive(got []seqPayload, live uint64) []seqPayload {
	for i, m := range got {
		if m.seq >= live {
			return got[:i]
		}
	}
	return got
}

// lastHole checks a replay that should hold every sequence from `from` up to
// the live batch (beforeLive's part of it): it returns the index in got just after the last missing
// run, with what is missing (0 and nil when nothing is). A hole can be
// anywhere: at the start (history no longer buffered), in the middle (a
// reply the publisher's ROUTER dropped at its high-water mark), or at the
// end, before the live batch. A batch before a hole may store blocks that a
// missing batch removed, so nothing before it may be applied: dropping it
// costs hits, applying it would index blocks the engine no longer holds.
// Joining mid-stream (not strict), the history may begin anywhere, even at
// the live batch itself.
func lastHole(got []seqPayload, from, live uint64, strict bool) (int, error) {
	want := from
	if !strict {
		want = live
		if len(got) > 0 {
			want = got[0].seq
		}
	}
	start := 0
	var err error
	for i, m := range got {
		// replay keeps sequences rising and from `from` on, so a batch
		// other than the one wanted is past it.
		if m.seq != want {
			start, err = i, fmt.Errorf("replay lacks sequences %d to %d", want, m.seq-1)
		}
		want = m.seq + 1
	}
	if want < live {
		start, err = len(got), fmt.Errorf("replay lacks sequences %d to %d", want, live-1)
	}
	return start, err
}

func (b *Backend) applyPayload(st *rankState, seq uint64, payload []byte) {
	st.have, st.last = true, seq
	if err := engineevents.DecodeBatch(payload, &st.batch); err != nil {
		b.stats.badBatches.Add(1)
		b.log.Warn("damaged KV event batch", "rank", st.rank, "seq", seq, "err", err)
		// The events decoded before the damage are whole; apply them.
	}
	b.apply(st.rank, &st.batch)
}

type seqPayload struct {
	seq     uint64
	payload []byte
}

// replay asks the rank's ROUTER for every buffered batch from `from` on.
// Both reply layouts are accepted: [topic, seq, payload] and [seq, payload]
// (the sequence and payload are always the last two frames; a DEALER may
// also see the ROUTER's empty delimiter first). The end marker's sequence is
// 0xFFFFFFFFFFFFFFFF.
func (b *Backend) replay(ctx context.Context, rank int, from uint64) ([]seqPayload, error) {
	ep, err := RankEndpoint(b.cfg.ReplayEndpoint, rank)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, b.cfg.ReplayTimeout)
	defer cancel()
	d := zmq4.NewDealer(rctx, zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(b.cfg.ReplayIdle))
	defer d.Close()
	if err := d.Dial(ep); err != nil {
		return nil, err
	}
	var start [8]byte
	binary.BigEndian.PutUint64(start[:], from)
	// The empty frame is the delimiter a REQ socket would add: the
	// publisher's ROUTER expects [identity, "", start].
	if err := d.SendMulti(zmq4.NewMsgFrom([]byte{}, start[:])); err != nil {
		return nil, err
	}
	type recv struct {
		m   zmq4.Msg
		err error
	}
	ch := make(chan recv, 1)
	var got []seqPayload
	for {
		go func() {
			m, err := d.Recv()
			ch <- recv{m, err}
		}()
		t := time.NewTimer(b.cfg.ReplayIdle)
		var r recv
		select {
		case r = <-ch:
			t.Stop()
		case <-t.C:
			cancel()
			<-ch // Recv returns once the socket's context is done
			return got, fmt.Errorf("replay idle for %v", b.cfg.ReplayIdle)
		}
		if r.err != nil {
			return got, r.err
		}
		f := r.m.Frames
		if len(f) < 2 || len(f[len(f)-2]) != 8 {
			return got, fmt.Errorf("replay reply with %d frames", len(f))
		}
		seq := binary.BigEndian.Uint64(f[len(f)-2])
		if seq == endSeq {
			return got, nil
		}
		if seq < from || (len(got) > 0 && seq <= got[len(got)-1].seq) {
			continue // out of order or repeated: never apply twice
		}
		got = append(got, seqPayload{seq, f[len(f)-1]})
	}
}
