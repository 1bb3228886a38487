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
}

// consoleViews bounds the tenants' views kept.
const consoleViews = 256

func newConsoleFeed(s *Service) *consoleFeed {
	return &consoleFeed{s: s, views: lru.New[*consoleView](consoleViews), drained: make(chan struct{})}
}

type consoleView struct {
	mu   sync.Mutex
	at   time.Time
	body []byte
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
	if v.body != nil && time.Since(v.at) < consoleEvery {
		return v.body, nil
	}
	st, err := f.s.gatherConsole(ctx, tenant)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	v.at, v.body = time.Now(), body
	return body, nil
}

// consoleTenant is the tenant a console request may see ("" = all), by
// the admin API's rule; ?tenant= narrows an operator's view.
func (s *Service) consoleTenant(r *http.Request) (string, error) {
	t, err := s.adminTenant(r.Header.Get("x-api-key"), r.Header.Get("Authorization"), r.URL.Query().Get("tenant"))
	switch status.Code(err) {
	case codes.OK:
		return t, nil
	case codes.PermissionDenied:
		return "", &apiError{Status: http.StatusForbidden, Kind: "permission_error", Message: status.Convert(err).Message()}
	default:
		return "", &apiError{Status: http.StatusUnauthorized, Kind: "authentication_error", Code: "invalid_api_key", Message: status.Convert(err).Message()}
	}
}

// serveConsoleState is GET /console/state: the state, once.
func (s *Service) serveConsoleState(w http.ResponseWriter, r *http.Request) error {
	tenant, err := s.consoleTenant(r)
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
// message, and the stream goes on.
func (s *Service) serveConsoleEvents(w http.ResponseWriter, r *http.Request) error {
	tenant, err := s.consoleTenant(r)
	if err != nil {
		return err
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		return &apiError{Status: http.StatusInternalServerError, Kind: "server_error", Message: "streaming is not supported here"}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	tick := time.NewTicker(consoleEvery)
	defer tick.Stop()
	for {
		body, err := s.console.state(r.Context(), tenant)
		if err != nil {
			msg, _ := json.Marshal(map[string]string{"message": status.Convert(err).Message()})
			body = msg
			fmt.Fprintf(w, "event: unavailable\ndata: %s\n\n", body)
		} else {
			fmt.Fprintf(w, "event: state\ndata: %s\n\n", body)
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
	return &apiError{Status: http.StatusServiceUnavailable, Kind: "server_error", Message: status.Convert(err).Message()}
}
