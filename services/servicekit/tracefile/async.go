package tracefile

import (
	"context"
	"sync/atomic"
	"time"

	"switchyard.dev/pkg/trace"
)

// Async puts a bounded, lossy queue in front of a sink: Emit never blocks
// (a full queue drops the record and counts it), and Run, in a goroutine
// the owner starts, writes and flushes. Emit and the counters are safe for
// concurrent use; the sink is only ever called from Run.
type Async struct {
	sink    trace.Sink
	ch      chan *trace.Record
	dropped atomic.Uint64
	written atomic.Uint64
	errs    atomic.Uint64
}

// NewAsync wraps sink with a queue of capacity records (0 = 1024).
func NewAsync(sink trace.Sink, capacity int) *Async {
	if capacity <= 0 {
		capacity = 1024
	}
	return &Async{sink: sink, ch: make(chan *trace.Record, capacity)}
}

// Emit queues a record; it reports false when the record was dropped.
func (a *Async) Emit(r *trace.Record) bool {
	select {
	case a.ch <- r:
		return true
	default:
		a.dropped.Add(1)
		return false
	}
}

// Dropped, Written and Errors are counters for metrics.
func (a *Async) Dropped() uint64 { return a.dropped.Load() }
func (a *Async) Written() uint64 { return a.written.Load() }
func (a *Async) Errors() uint64  { return a.errs.Load() }

// Run writes queued records until ctx is done, flushing on every tick;
// then it drains what is queued, flushes and closes the sink. Each record
// is written at the wall-clock time it is dequeued (the file envelopes'
// timestamp).
func (a *Async) Run(ctx context.Context, tick <-chan time.Time) error {
	for {
		select {
		case r := <-a.ch:
			a.write(r)
		case <-tick:
			if a.sink.Flush() != nil {
				a.errs.Add(1)
			}
		case <-ctx.Done():
			for {
				select {
				case r := <-a.ch:
					a.write(r)
				default:
					return a.sink.Close()
				}
			}
		}
	}
}

func (a *Async) write(r *trace.Record) {
	if err := a.sink.Write(time.Now(), r); err != nil {
		a.errs.Add(1)
		return
	}
	a.written.Add(1)
}
