package frontend

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"switchyard.dev/services/servicekit/lru"
)

// The console (/console on the HTTP port) is a page embedded in the binary
// (package console) that draws the fleet from one JSON document, first
// fetched from /console/state, then streamed from /console/events. The
// document is gathered from the scheduler replicas (console_gather.go): the worker set
// and its loads from one (every replica holds the same), the programs and
// the sessions from all of them, merged as the admin API merges them. It
// follows the admin API's rule for keys: a tenant's key sees its tenant's
// sessions and programs only, an operator's key every tenant's.

// consoleEvery is how often the console's stream sends the state, and how
// long one gathered state serves every viewer of a tenant: many open
// consoles cost the schedulers one gathering a second, not one each.
const consoleEvery = time.Second

// consoleSessions bounds the sessions one state lists (the most recently
// active).
const consoleSessions = 200

// consoleWriteTimeout bounds how long one frame of /console/events may take
// to leave: a viewer that has not taken a frame in this long cannot follow
// one a second (the page itself gives up after 6 s without a byte). Its
// stream ends rather than holding the handler, the frame's copy and the
// connection for as long as the viewer keeps the connection open without
// reading.
const consoleWriteTimeout = 10 * time.Second

// consoleFeed is the server side's aggregator: the latest state of each
// tenant's view, gathered at most once per consoleEvery.
type consoleFeed struct {
	s  *Service
	mu sync.Mutex
	// views by tenant ("" = all), bounded (an operator may ask for any
	// tenant): each has its own lock, held while it gathers, so that the
	// viewers of one tenant wait for one gathering.
	views *lru.Cache[*consoleView]
	// drained is closed when the frontend begins to drain: open event
	// streams end instead of holding the drain to its deadline.
	drained chan struct{}
	// writeTimeout is consoleWriteTimeout (shorter in tests).
	writeTimeout time.Duration
}

// consoleViews bounds the tenants' views kept.
const consoleViews = 256

func newConsoleFeed(s *Service) *consoleFeed {
	return &consoleFeed{s: s, views: lru.New[*consoleView](consoleViews), drained: make(chan struct{}), writeTimeout: consoleWriteTimeout}
}

type consoleView struct {
	mu   sync.Mutex
	at   time.Time
	body []byte
	// err is the last gathering's failure, shared like a body: while the
	// schedulers do not answer, each viewer waiting on mu would otherwise
	// gather (and wait out the calls' timeouts) in turn, the last one
	// long after the page gave up on its stream.
	err error
}

func (f *consoleFeed) state(ctx context.Context, tenant string) ([]byte, error) {
	f.mu.Lock()
	slot := f.views.Touch(tenant)
	if *slot == nil {
		*slot = &consoleView{}
	}
	v := *slot
	f.mu.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.at.IsZero() && time.Since(v.at) < consoleEvery {
		return v.body, v.err
	}
	st, err := f.s.gatherConsole(ctx, tenant)
	if err != nil {
		if ctx.Err() == nil { // not this viewer's leaving: the others' answer too
			v.at, v.body, v.err = time.Now(), nil, err
		}
		return nil, err
	}
	body, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	v.at, v.body, v.err = time.Now(), body, nil
	return body, nil
}

// consoleTenant is the tenant a console request that asks for tenant
// asked ("": every one it may) may see, by the admin API's rule.
func (s *Service) consoleTenant(r *http.Request, asked string) (string, error) {
	t, err := s.adminTenant(r.Header.Get("x-api-key"), r.Header.Get("Authorization"), asked)
	switch status.Code(err) {
	case codes.OK:
		return t, nil
	case codes.PermissionDenied:
		return "", &apiError{Status: http.StatusForbidden, Kind: "permission_error", Message: status.Convert(err).Message()}
	default:
		return "", unauthorized(status.Convert(err).Message())
	}
}

// serveConsoleState is GET /console/state: the state, once; ?tenant=
// narrows an operator's view.
func (s *Service) serveConsoleState(w http.ResponseWriter, r *http.Request) error {
	tenant, err := s.consoleTenant(r, r.URL.Query().Get("tenant"))
	if err != nil {
		return err
	}
	body, err := s.console.state(r.Context(), tenant)
	if err != nil {
		return consoleUnavailable(r.Context(), err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, err = w.Write(body)
	return err
}

// serveConsoleEvents is GET /console/events: the state every
// consoleEvery as Server-Sent Events ("event: state"), until the client
// goes; a gathering that fails is sent as "event: unavailable" with its
// message, and the stream goes on. ?tenant= narrows as for the state.
func (s *Service) serveConsoleEvents(w http.ResponseWriter, r *http.Request) error {
	tenant, err := s.consoleTenant(r, r.URL.Query().Get("tenant"))
	if err != nil {
		return err
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		return &apiError{Status: http.StatusInternalServerError, Kind: "server_error", Message: "streaming is not supported here"}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	if r.Method == http.MethodHead {
		// The headers only. A HEAD answer has no body, so the client takes
		// it as complete and reuses the connection; a stream sent into it
		// would never end, and its next request would wait behind it.
		return nil
	}
	rc := http.NewResponseController(w)
	tick := time.NewTicker(consoleEvery)
	defer tick.Stop()
	for {
		body, err := s.console.state(r.Context(), tenant)
		// Unsupported (a wrapper that hides the connection) leaves the
		// stream as it was: bounded by the viewer's connection only.
		rc.SetWriteDeadline(time.Now().Add(s.console.writeTimeout))
		if err != nil {
			msg, _ := json.Marshal(map[string]string{"message": upstreamMessage(status.Convert(err))})
			body = msg
			_, err = fmt.Fprintf(w, "event: unavailable\ndata: %s\n\n", body)
		} else {
			_, err = fmt.Fprintf(w, "event: state\ndata: %s\n\n", body)
		}
		if err != nil {
			return nil // the viewer left, or took no frame within consoleWriteTimeout
		}
		flusher.Flush()
		select {
		case <-r.Context().Done():
			return nil
		case <-s.console.drained:
			return nil // the frontend is stopping: the page reconnects elsewhere
		case <-tick.C:
		}
	}
}

// consoleUnavailable is a gathering's failure as an answer: the client
// left (499, nothing to say), or the schedulers did not answer (503).
func consoleUnavailable(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return &apiError{Status: 499, Message: "the client went away"}
	}
	return &apiError{Status: http.StatusServiceUnavailable, Kind: "server_error", Message: upstreamMessage(status.Convert(err))}
}
