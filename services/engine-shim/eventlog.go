package engineshim

import (
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/services/servicekit/kvwire"
)

// eventLog numbers the engine's KV event batches and keeps the newest ones
// for replay, whichever engine the shim fronts: the simulated driver
// publishes each step's events, a real engine's adapter each batch it maps.
// Sequences start at 1 in every epoch and have no gaps. It is safe for
// concurrent use; an engine that must keep a snapshot consistent with a
// sequence publishes under its own lock and reads last under the same lock.
type eventLog struct {
	workerID string
	epoch    uint64
	now      func() time.Time

	mu       sync.Mutex
	capacity int
	batches  []*kvv1.KvEventBatch // oldest first, consecutive sequences
	next     uint64               // sequence of the next batch
	// changed is closed (and replaced) whenever a batch is appended, waking
	// every subscriber at once.
	changed chan struct{}
}

func newEventLog(workerID string, epoch uint64, capacity int, now func() time.Time) *eventLog {
	return &eventLog{workerID: workerID, epoch: epoch, now: now, capacity: max(capacity, 1), next: 1, changed: make(chan struct{})}
}

// publish appends evs as the next batch (nothing when evs is empty).
func (l *eventLog) publish(evs []kv.Event) {
	if len(evs) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.batches = append(l.batches, &kvv1.KvEventBatch{
		WorkerId: l.workerID,
		Epoch:    l.epoch,
		Sequence: l.next,
		Events:   kvwire.EventsToProto(evs),
		Time:     timestamppb.New(l.now()),
	})
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
func (l *eventLog) last() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next - 1
}

// nextSequence is the sequence the next batch will carry.
func (l *eventLog) nextSequence() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next
}

// batchesFrom reads batches from a sequence on (0: from the next one). It
// returns the batches available now, the channel that closes when more
// arrive, and errTooOld when seq is no longer buffered.
func (l *eventLog) batchesFrom(seq uint64) ([]*kvv1.KvEventBatch, <-chan struct{}, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq == 0 {
		seq = l.next
	}
	oldest := l.next - uint64(len(l.batches))
	if seq < oldest {
		return nil, nil, errTooOld
	}
	var bs []*kvv1.KvEventBatch
	if seq < l.next {
		bs = l.batches[seq-oldest:]
	}
	// Copy (the log reuses its array) and bound one read, so a subscriber
	// replaying the whole buffer does not hold the lock for long.
	return slices.Clone(bs[:min(len(bs), maxBatchesPerRead)]), l.changed, nil
}

const maxBatchesPerRead = 1024
