package engineshim

import (
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
)

// eventLog numbers the engine's KV event batches and keeps the newest ones
// for replay. Sequences start at 1 in every epoch and have no gaps. It is
// guarded by the driver's mutex.
type eventLog struct {
	capacity int
	batches  []*kvv1.KvEventBatch // oldest first, consecutive sequences
	next     uint64               // sequence of the next batch
	// changed is closed (and replaced) whenever a batch is appended, waking
	// every subscriber at once.
	changed chan struct{}
}

func newEventLog(capacity int) *eventLog {
	return &eventLog{capacity: max(capacity, 1), next: 1, changed: make(chan struct{})}
}

// append adds a batch that already carries sequence l.next.
func (l *eventLog) append(b *kvv1.KvEventBatch) {
	l.batches = append(l.batches, b)
	if len(l.batches) > l.capacity {
		// Copy down now and then instead of reslicing forever, so the
		// array does not keep dropped batches alive.
		if cap(l.batches) > 2*l.capacity {
			l.batches = append(make([]*kvv1.KvEventBatch, 0, 2*l.capacity), l.batches[len(l.batches)-l.capacity:]...)
		} else {
			l.batches[0] = nil
			l.batches = l.batches[1:]
		}
	}
	l.next++
	close(l.changed)
	l.changed = make(chan struct{})
}

// last is the sequence of the newest batch (0 before the first).
func (l *eventLog) last() uint64 { return l.next - 1 }

// oldest is the first sequence still buffered (next when empty).
func (l *eventLog) oldest() uint64 { return l.next - uint64(len(l.batches)) }

// from returns the buffered batches with sequence >= seq; ok is false when
// some of them are no longer buffered.
func (l *eventLog) from(seq uint64) (batches []*kvv1.KvEventBatch, ok bool) {
	if seq < l.oldest() {
		return nil, false
	}
	if seq >= l.next {
		return nil, true
	}
	return l.batches[seq-l.oldest():], true
}
