package frontend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"switchyard.dev/services/servicekit"
)

// A peer can go silent without failing: its process stopped or wedged, its
// host gone without a reset. Nothing then ends a call to it, and the
// connection's keepalive only notices after about 13 s. So a call that has
// waited probeAfter asks the peer's grpc.health.v1 on the same connection:
// a live peer answers at once, however long the call itself takes (a
// prefill, an admission wait); one that does not answer within probeTimeout
// counts as failed. An engine shim's attempt then moves to another worker
// (watchdog.go), a scheduler replica's turn to the next owner
// (schedulers.go).
const (
	probeAfter   = 500 * time.Millisecond
	probeTimeout = time.Second
)

// healthProbe is one connection's health probe, shared by every call that
// waits on it: they join the probe in flight, or take the verdict of one
// that ended less than probeAfter ago, so that a busy peer with many calls
// waiting is asked once.
type healthProbe struct {
	conn    *grpc.ClientConn
	subject string // says whose health it is in a verdict

	mu       sync.Mutex
	probing  chan struct{} // closed when the probe in flight ends
	err      error         // the last probe's verdict: nil alive
	probedAt time.Time     // when it ended; zero: no verdict to reuse
}

func newHealthProbe(conn *grpc.ClientConn, subject string) *healthProbe {
	return &healthProbe{conn: conn, subject: subject}
}

// errNoVerdict: the probe a caller joined ended with its own call, before
// the peer answered; ask again later.
var errNoVerdict = errors.New("no verdict")

// alive asks the peer's grpc.health.v1 whether it is serving, within
// probeTimeout of ctx: nil when it is (or has no health service), else why
// not.
func (p *healthProbe) alive(ctx context.Context) error {
	p.mu.Lock()
	if p.probing == nil && !p.probedAt.IsZero() && time.Since(p.probedAt) < probeAfter {
		err := p.err
		p.mu.Unlock()
		return err
	}
	if running := p.probing; running != nil {
		p.mu.Unlock()
		select {
		case <-running:
		case <-ctx.Done():
			return errNoVerdict
		}
		p.mu.Lock()
		err, at := p.err, p.probedAt
		p.mu.Unlock()
		if at.IsZero() {
			return errNoVerdict
		}
		return err
	}
	done := make(chan struct{})
	p.probing = done
	p.mu.Unlock()

	start := time.Now()
	err := p.check(ctx)
	// The caller's call ended (its client left, its deadline passed: a
	// Route's route timeout), not the probe's second: no verdict on the
	// peer, which the calls joining it would all take as failed. A deadline
	// can fail the check before ctx says so (the peer's side of it, carried
	// as the call's timeout, may fire first): one that came before the
	// probe's own and has passed is the caller's too.
	ended := ctx.Err() != nil
	if d, ok := ctx.Deadline(); ok && d.Before(start.Add(probeTimeout)) && !time.Now().Before(d) {
		ended = true
	}
	p.mu.Lock()
	p.probing = nil
	if ended {
		p.probedAt = time.Time{}
		err = errNoVerdict
	} else {
		p.err, p.probedAt = err, time.Now()
	}
	p.mu.Unlock()
	close(done)
	return err
}

func (p *healthProbe) check(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	err := servicekit.CheckHealth(pctx, p.conn)
	switch {
	case err == nil, status.Code(err) == codes.Unimplemented: // no health service: nothing to learn
		return nil
	case errors.Is(err, servicekit.ErrNotServing):
		return fmt.Errorf("%s is %w", p.subject, err)
	default:
		return fmt.Errorf("%s did not answer a health check within %v", p.subject, probeTimeout)
	}
}
