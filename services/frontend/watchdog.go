package frontend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
)

// Each attempt on a worker has a watchdog: once the worker has sent nothing
// for probeAfter it asks the shim's health (probe.go), and one that does not
// answer counts as failed (migration reason "unresponsive"); a worker silent
// for StreamIdleTimeout fails the attempt whatever it answers (reason
// "stalled").
type watchdog struct {
	idle   time.Duration
	conn   *pooledConn
	pool   *connPool
	ctx    context.Context // the attempt's: probes end with it
	cancel context.CancelFunc

	mu     sync.Mutex
	idleT  *time.Timer
	probeT *time.Timer
	cause  *stalledError // set when the watchdog ended the attempt
}

// stalledError is the failure of an attempt its watchdog ended: the worker
// counts as failed; unmigrated, the client gets a 504.
type stalledError struct {
	reason string // "stalled" or "unresponsive"
	msg    string
}

func (e stalledError) Error() string { return e.msg }

func (e stalledError) GRPCStatus() *status.Status {
	return status.New(codes.DeadlineExceeded, e.msg)
}

func newWatchdog(ctx context.Context, cancel context.CancelFunc, pool *connPool, conn *pooledConn, idle time.Duration) *watchdog {
	w := &watchdog{idle: idle, conn: conn, pool: pool, ctx: ctx, cancel: cancel}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.idleT = time.AfterFunc(idle, func() {
		w.fail(stalledError{reason: "stalled", msg: fmt.Sprintf("worker sent nothing for %v", idle)})
	})
	w.probeT = time.AfterFunc(probeAfter, w.probe)
	return w
}

// heard restarts both clocks: the worker sent a message.
func (w *watchdog) heard() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cause == nil {
		w.idleT.Reset(w.idle)
		w.probeT.Reset(probeAfter)
	}
}

// probe asks a silent worker's shim whether it is alive.
func (w *watchdog) probe() {
	err := w.conn.probe.alive(w.ctx)
	switch {
	case w.ctx.Err() != nil:
		return // the attempt ended meanwhile
	case err == nil, errors.Is(err, errNoVerdict):
		w.mu.Lock()
		if w.cause == nil {
			w.probeT.Reset(probeAfter)
		}
		w.mu.Unlock()
	default:
		w.fail(stalledError{reason: "unresponsive", msg: err.Error()})
	}
}

func (w *watchdog) fail(cause stalledError) {
	w.mu.Lock()
	if w.cause == nil {
		w.cause = &cause
		w.idleT.Stop()
		w.probeT.Stop()
	}
	w.mu.Unlock()
	w.cancel()
}

// explain turns the error of a call the watchdog cut short into its cause.
func (w *watchdog) explain(err error) error {
	if err == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cause != nil {
		return *w.cause
	}
	return err
}

// stop ends the attempt's context and clocks, and its hold on the
// connection.
func (w *watchdog) stop() {
	w.mu.Lock()
	w.idleT.Stop()
	w.probeT.Stop()
	w.mu.Unlock()
	w.cancel()
	w.pool.release(w.conn)
}

// open starts an attempt on the worker at addr under its own context (the
// previous attempt's ends), watched for silence: it opens the Generate
// stream and reads its first message, and only then is the response
// committed to that worker.
func (a *attempts) open(gctx context.Context, addr string) (genStream, *enginev1.GenerateResponse, error) {
	a.stop()
	a.watch = nil
	conn, err := a.s.workers.acquire(addr)
	if errors.Is(err, errPoolClosed) {
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errDial, err)
	}
	actx, cancel := context.WithCancel(gctx)
	a.watch = newWatchdog(actx, cancel, a.s.workers, conn, a.s.cfg.StreamIdleTimeout)
	st, err := enginev1.NewEngineShimServiceClient(conn.conn).Generate(actx, a.greq)
	if err == nil {
		var first *enginev1.GenerateResponse
		if first, err = st.Recv(); err == nil {
			a.watch.heard()
			return st, first, nil
		}
		if err == io.EOF {
			err = status.Error(codes.Unavailable, "worker closed the stream without a result")
		}
	}
	return nil, nil, a.watch.explain(fmt.Errorf("generate: %w", err))
}

// recv reads the current attempt's next message; each one restarts the
// watchdog.
func (a *attempts) recv(st genStream) (*enginev1.GenerateResponse, error) {
	msg, err := st.Recv()
	if err != nil {
		return nil, a.watch.explain(err)
	}
	a.watch.heard()
	return msg, nil
}

// stop ends the current attempt's context and watchdog.
func (a *attempts) stop() {
	if a.watch != nil {
		a.watch.stop()
	}
}
