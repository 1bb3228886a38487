package engineshim

import (
	"context"
	"log/slog"
	"sync"
	"time"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	"switchyard.dev/pkg/enginesim"
	"switchyard.dev/pkg/kv"
)

// driver owns the simulated engine and steps it in real time; it is the
// shim's Engine when no real engine is configured (simengine.go). Every
// engine call goes through it under mu, so the engine (which is not
// concurrent) sees one caller, and the event sequence is a total order of
// the cache's changes: the driver publishes to the log only under mu.
type driver struct {
	mu      sync.Mutex
	eng     *enginesim.Engine
	ecfg    enginesim.Config // the engine's effective configuration
	log     *eventLog
	pool    *poolClient // nil without a shared pool
	streams map[string]*genStream
	// Events of the step being slept through. They are published when the
	// step ends, or earlier if a snapshot or a hint needs the sequence to
	// cover the cache as it now is.
	pending []kv.Event
	stopped bool
	// draining refuses new requests while the ones in flight finish;
	// drained is closed once none is left.
	draining bool
	drained  chan struct{}

	workerID     string
	drainTimeout time.Duration
	logger       *slog.Logger
	now          func() time.Time
	wake         chan struct{}
	// idleSince is when the engine last ran out of work (zero while it
	// steps): its clock moves only with steps, so it is told of idle time
	// before it books copies again (catchUpLocked).
	idleSince time.Time

	steps int64
}

func newDriver(eng *enginesim.Engine, log *eventLog, now func() time.Time) *driver {
	return &driver{
		eng:      eng,
		ecfg:     eng.Config(),
		log:      log,
		streams:  map[string]*genStream{},
		workerID: log.workerID,
		logger:   slog.Default(),
		now:      now,
		wake:     make(chan struct{}, 1),
		drained:  make(chan struct{}),
	}
}

// drain stops taking new requests and returns a channel closed when every
// request in flight has finished (or been aborted).
func (d *driver) drain() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.draining {
		d.draining = true
		d.checkDrainedLocked()
	}
	return d.drained
}

func (d *driver) checkDrainedLocked() {
	if d.draining && len(d.streams) == 0 {
		select {
		case <-d.drained:
		default:
			close(d.drained)
		}
	}
}

// genStream is the hand-off from the driver to one Generate call. The driver
// never blocks on it: tokens accumulate until the call takes them.
type genStream struct {
	notify chan struct{} // capacity 1: "something new"

	mu        sync.Mutex
	tokens    []uint32
	result    *enginev1.GenerateResult
	err       error
	arrived   time.Time
	first     time.Time
	firstStep time.Duration // duration of the step that produced the first token
	last      time.Time
	n         int
	// stop watches the output for the request's stop sequences (nil:
	// none); prompt and cached are what the result's usage needs when one
	// ends it, the engine having no finish of its own to report then.
	stop           *stopWatch
	prompt, cached int
}

func (s *genStream) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// take returns what accumulated since the last call.
func (s *genStream) take() (tokens []uint32, result *enginev1.GenerateResult, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tokens, s.tokens = s.tokens, nil
	return tokens, s.result, s.err
}

func (d *driver) add(r enginesim.Request, stop *stopWatch) (*genStream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped || d.draining {
		return nil, errStopped
	}
	if err := d.eng.Add(r); err != nil {
		return nil, err
	}
	st := &genStream{notify: make(chan struct{}, 1), arrived: d.now(), stop: stop, prompt: len(r.Prompt)}
	d.streams[r.ID] = st
	select {
	case d.wake <- struct{}{}:
	default:
	}
	return st, nil
}

// abort drops a request whose caller went away. Its blocks stay cached.
func (d *driver) abort(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.streams[id]; !ok {
		return // finished meanwhile
	}
	delete(d.streams, id)
	d.eng.Abort(id)
	d.checkDrainedLocked()
}

// publishLocked turns the pending events into the next batch.
func (d *driver) publishLocked() {
	d.log.publish(d.pending)
	d.pending = d.pending[:0]
}

// run steps the engine until ctx is done: step, sleep the step's simulated
// duration, then publish its events and deliver its tokens. With no work it
// waits for Add. On exit every open Generate call fails with UNAVAILABLE.
func (d *driver) run(ctx context.Context) error {
	defer d.stop()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var outs []enginesim.Output
	// end is when the previous step ends on the wall clock. Back-to-back
	// steps are scheduled from it rather than from "now", so timer slack
	// does not accumulate: at high speed-ups many steps are shorter than
	// the timer's resolution, and the stream still keeps the modelled pace.
	var end time.Time
	for {
		d.mu.Lock()
		if !d.eng.HasWork() {
			if d.idleSince.IsZero() {
				d.idleSince = d.now()
			}
			d.mu.Unlock()
			end = time.Time{}
			select {
			case <-ctx.Done():
				return nil
			case <-d.wake:
				continue
			}
		}
		d.catchUpLocked()
		d.idleSince = time.Time{}
		res := d.eng.Step()
		d.steps++
		d.pending = append(d.pending, res.Events...)
		outs = append(outs[:0], res.Outputs...) // the engine reuses its slice
		d.mu.Unlock()

		dur := res.Duration
		if dur <= 0 && len(outs) == 0 {
			// Nothing could be scheduled (cannot happen with a valid
			// engine, but never spin): wait for a change.
			dur = time.Millisecond
		}
		now := d.now()
		if end.IsZero() || now.Sub(end) > maxLag {
			end = now // idle before, or too far behind to catch up
		}
		end = end.Add(dur)
		if wait := end.Sub(now); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil
			case <-timer.C:
			}
		}

		d.mu.Lock()
		d.publishLocked()
		now = d.now()
		for _, o := range outs {
			if st := d.streams[o.RequestID]; st != nil && d.deliver(st, o, now, res.Duration) {
				delete(d.streams, o.RequestID)
			}
		}
		d.checkDrainedLocked()
		d.mu.Unlock()
	}
}

// deliver hands one output token to its stream and reports whether the
// request ended with it: the engine finished it, or it completed one of the
// request's stop sequences, and then the engine stops it here.
func (d *driver) deliver(st *genStream, o enginesim.Output, now time.Time, stepDur time.Duration) bool {
	st.mu.Lock()
	st.tokens = append(st.tokens, o.Token)
	st.n++
	if o.First {
		st.first, st.firstStep, st.cached = now, stepDur, o.CachedTokens
	}
	st.last = now
	finish, usage := o.Finish, o.Usage
	if finish == enginesim.FinishNone && st.stop != nil && st.stop.hit(o.Token) {
		d.eng.Stop(o.RequestID)
		finish, usage = enginesim.FinishStop, &enginesim.Usage{PromptTokens: st.prompt, CompletionTokens: st.n, CachedTokens: st.cached}
	}
	if finish != enginesim.FinishNone {
		st.result = &enginev1.GenerateResult{
			FinishReason: finishToProto[finish],
			Usage: &enginev1.Usage{
				PromptTokens:     uint32(usage.PromptTokens),
				CompletionTokens: uint32(usage.CompletionTokens),
				CachedTokens:     uint32(usage.CachedTokens),
			},
			Timing:   st.timing(),
			WorkerId: d.workerID,
		}
	}
	st.mu.Unlock()
	st.signal()
	return finish != enginesim.FinishNone
}

// timing reports wall-clock times. The engine does not say when a request
// was first scheduled; the step that produced the first token stands for the
// prefill (exact unless the prompt was chunked over several steps).
func (st *genStream) timing() *enginev1.Timing {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	ttft := st.first.Sub(st.arrived)
	prefill := min(st.firstStep, ttft)
	t := &enginev1.Timing{
		QueueMs:   ms(ttft - prefill),
		PrefillMs: ms(prefill),
		TotalMs:   ms(st.last.Sub(st.arrived)),
	}
	if st.n > 1 {
		t.MeanItlMs = ms(st.last.Sub(st.first)) / float64(st.n-1)
	}
	return t
}

// stop fails every open call and refuses new ones.
func (d *driver) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopped = true
	d.publishLocked()
	for id, st := range d.streams {
		st.mu.Lock()
		st.err = errStopped
		st.mu.Unlock()
		st.signal()
		d.eng.Abort(id)
		delete(d.streams, id)
	}
	d.checkDrainedLocked()
}

// Snapshot returns the whole cache and the sequence it is consistent with.
func (d *driver) Snapshot() ([]kv.Event, uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.publishLocked()
	return d.eng.Snapshot(), d.log.last()
}

// applyHints runs hints in order and publishes their changes as one batch.
func (d *driver) applyHints(hs []enginesim.Hint) []enginesim.HintOutcome {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.publishLocked() // the hints' events come after the current step's
	d.catchUpLocked()
	out := make([]enginesim.HintOutcome, len(hs))
	for i, h := range hs {
		out[i] = d.eng.ApplyHint(h)
		d.pending = append(d.pending, out[i].Events...)
	}
	d.publishLocked()
	return out
}

// catchUpLocked tells an idle engine how long it has been idle.
func (d *driver) catchUpLocked() {
	if d.idleSince.IsZero() {
		return
	}
	now := d.now()
	d.eng.Advance(now.Sub(d.idleSince))
	d.idleSince = now
}

func (d *driver) stats() enginesim.Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.eng.Stats()
}

// maxLag bounds how far behind the modelled pace the driver catches up (by
// not sleeping) after a stall, so a pause does not turn into a burst.
const maxLag = 100 * time.Millisecond

// nextSequence is the sequence of the next batch.
func (d *driver) nextSequence() uint64 { return d.log.nextSequence() }
