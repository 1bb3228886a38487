package scheduler

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// watcherBuffer is how many events a watch stream may fall behind before it
// is cut off: the routing and admission cores must never wait for a reader.
const watcherBuffer = 4096

// fanout hands events to the subscribers of one watch stream without ever
// waiting for one: a subscriber whose buffer is full is dropped (its lagged
// channel closes) and must watch again.
type fanout[T any] struct {
	mu      sync.Mutex
	subs    map[*subscriber[T]]struct{}
	n       atomic.Int32       // len(subs), read without the lock
	dropped prometheus.Counter // subscribers cut off for lagging
}

type subscriber[T any] struct {
	events chan T
	lagged chan struct{} // closed when the buffer overflowed
	// wants, when set, picks the events handed to this subscriber: one
	// that wants few is not woken (nor its buffer filled) for the rest.
	wants func(T) bool
}

func newFanout[T any](dropped prometheus.Counter) *fanout[T] {
	return &fanout[T]{subs: map[*subscriber[T]]struct{}{}, dropped: dropped}
}

// active reports whether anyone listens, so publishers can skip building
// events nobody reads.
func (f *fanout[T]) active() bool { return f.n.Load() > 0 }

// subscribe hands the subscriber the events wants picks, every one when
// wants is nil.
func (f *fanout[T]) subscribe(wants func(T) bool) *subscriber[T] {
	sub := &subscriber[T]{events: make(chan T, watcherBuffer), lagged: make(chan struct{}), wants: wants}
	f.mu.Lock()
	f.subs[sub] = struct{}{}
	f.n.Store(int32(len(f.subs)))
	f.mu.Unlock()
	return sub
}

func (f *fanout[T]) unsubscribe(sub *subscriber[T]) {
	f.mu.Lock()
	delete(f.subs, sub)
	f.n.Store(int32(len(f.subs)))
	f.mu.Unlock()
}

// publish hands evs to every subscriber, in order.
func (f *fanout[T]) publish(evs ...T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for sub := range f.subs {
		for _, e := range evs {
			if sub.wants != nil && !sub.wants(e) {
				continue
			}
			select {
			case sub.events <- e:
				continue
			default:
			}
			delete(f.subs, sub)
			close(sub.lagged)
			f.dropped.Inc()
			break
		}
	}
	f.n.Store(int32(len(f.subs)))
}

// pump sends a subscriber's events to its stream until the client leaves,
// the subscriber lags or the service shuts down.
func pump[T any](ctx context.Context, stop <-chan struct{}, sub *subscriber[T], send func(T) error) error {
	for {
		select {
		case ev := <-sub.events:
			if err := send(ev); err != nil {
				return err
			}
		case <-sub.lagged:
			return toStatus(errLagged)
		case <-ctx.Done():
			return toStatus(ctx.Err())
		case <-stop:
			return toStatus(errShutdown)
		}
	}
}
