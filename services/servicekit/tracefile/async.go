package tracefile

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"switchyard.dev/pkg/trace"
)

// Async puts a bounded, lossy queue in front of a sink: Emit never blocks
// (a full queue drops the record and counts it), and Run, in a goroutine
// the owner starts, writes and flushes. Emit and the counters are safe for
// concurrent use; the sink is only ever called from Run.
//
// A sink that fails (its file cannot be opened, the disk is full) drops
// the records it held rather than hold them until it works again; Run
// counts them, and logs the first failure of a run of them at WARN and the
// first success after it at INFO, so that an unwritable file is neither
// silent nor a line per record.
type Async struct {
	sink    trace.Sink
	log     *slog.Logger
	ch      chan *trace.Record
	dropped atomic.Uint64
	lost    atomic.Uint64
	written atomic.Uint64
	errs    atomic.Uint64

	// Run's own: whether the sink is failing, lost when it began to, and
	// the records handed to it since its last flush or failure (a flush
	// that succeeds with some is the sink writing again).
	failing    bool
	lostBefore uint64
	handed     int
}

// NewAsync wraps sink with a queue of capacity records (0 = 1024); log
// (nil: slog.Default()) hears of the sink's failures.
func NewAsync(sink trace.Sink, capacity int, log *slog.Logger) *Async {
	if capacity <= 0 {
		capacity = 1024
	}
	if log == nil {
		log = slog.Default()
	}
	return &Async{sink: sink, log: log, ch: make(chan *trace.Record, capacity)}
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

// Counters for metrics: Dropped, the records a full queue refused; Written,
// those the sink took; Lost, those a failed write or flush dropped, as the
// sink counts them (trace.Lost; some of them counted in Written: taken,
// then dropped with the sink's buffer);
// Errors, the failed writes and flushes.
func (a *Async) Dropped() uint64 { return a.dropped.Load() }
func (a *Async) Written() uint64 { return a.written.Load() }
func (a *Async) Lost() uint64    { return a.lost.Load() }
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
			a.flushed(a.sink.Flush())
		case <-ctx.Done():
			for {
				select {
				case r := <-a.ch:
					a.write(r)
				default:
					err := a.sink.Close()
					a.flushed(err)
					return err
				}
			}
		}
	}
}

func (a *Async) write(r *trace.Record) {
	a.handed++
	if err := a.sink.Write(time.Now(), r); err != nil {
		a.failed(err)
		return
	}
	a.written.Add(1)
}

// flushed accounts for a flush: a failure, or, after failures, writing
// again.
func (a *Async) flushed(err error) {
	if err != nil {
		a.failed(err)
		return
	}
	if a.failing && a.handed > 0 {
		a.failing = false
		a.log.Info("request traces are written again", "records_lost", a.lost.Load()-a.lostBefore)
	}
	a.handed = 0
}

// failed counts a failed write or flush and the records the sink says it
// dropped with it (trace.Lost), and logs the first failure of a run.
func (a *Async) failed(err error) {
	a.errs.Add(1)
	if !a.failing {
		a.failing, a.lostBefore = true, a.lost.Load()
		a.log.Warn("request traces cannot be written: records are dropped until a write succeeds", "err", err)
	}
	a.lost.Add(uint64(trace.Lost(err)))
	a.handed = 0
}
