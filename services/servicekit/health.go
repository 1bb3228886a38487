package servicekit

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// CaughtUpService is the health status a service that rebuilds its state
// from the workers' KV streams (a flash indexer) reports under: NOT_SERVING
// until it has loaded every worker's snapshot once, then SERVING while it
// holds the fleet (kvfollow.Follower.CaughtUp says which later loads count:
// not a new worker's). Callers
// with replicas of it ask only those caught up; the server's own status
// ("") says only that it is up.
const CaughtUpService = "switchyard.caught_up"

// healthService is the grpc.health.v1 service a Server registers: grpc-go's
// health.Server, except that once shutdown has closed done a Watch ends
// (Unavailable) as soon as its watcher has been told a status other than SERVING.
// grpc-go's Watch never ends on its own, so without this every watcher would hold the
// drain until its deadline.
type healthService struct {
	*health.Server
	done <-chan struct{} // Server.done: closed after health.Server.Shutdown
}

func (h *healthService) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	w := &watchStream{Health_WatchServer: stream, ctx: ctx, done: h.done, told: make(chan struct{})}
	w.last.Store(-1) // nothing sent yet
	go func() {
		select {
		case <-h.done:
			// The status is no longer SERVING (Shutdown has returned): if the last one
			// sent was not SERVING the watcher knows; otherwise the NOT_SERVING update
			// is on its way and Send ends the stream after sending it. Send stores then
			// checks done, this checks done then loads, so one of the two sees it.
			if st := w.last.Load(); st >= 0 && healthpb.HealthCheckResponse_ServingStatus(st) != healthpb.HealthCheckResponse_SERVING {
				w.end()
			}
		case <-ctx.Done():
			return
		}
		select {
		case <-w.told:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := h.Server.Watch(req, w)
	select {
	case <-w.told:
		return status.Error(codes.Unavailable, "server is shutting down")
	default:
		return err
	}
}

// watchStream is the stream health.Server.Watch writes to: it records what was sent
// and ends the watch once the watcher has been told shutdown's NOT_SERVING.
type watchStream struct {
	healthpb.Health_WatchServer
	ctx  context.Context
	done <-chan struct{}
	last atomic.Int32 // the last status sent; -1 before the first
	once sync.Once
	told chan struct{} // closed when the watch should end
}

func (w *watchStream) Context() context.Context { return w.ctx }

func (w *watchStream) Send(m *healthpb.HealthCheckResponse) error {
	if err := w.Health_WatchServer.Send(m); err != nil {
		return err
	}
	w.last.Store(int32(m.GetStatus()))
	if m.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		select {
		case <-w.done:
			w.end()
		default:
		}
	}
	return nil
}

func (w *watchStream) end() { w.once.Do(func() { close(w.told) }) }

// serveHealthz is GET /healthz: 200 SERVING or 503 NOT_SERVING, from the same health
// server as grpc.health.v1, for probes that speak only HTTP.
func (s *Server) serveHealthz(w http.ResponseWriter, r *http.Request) {
	resp, err := s.health.Check(r.Context(), &healthpb.HealthCheckRequest{})
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "NOT_SERVING")
		return
	}
	fmt.Fprintln(w, "SERVING")
}
