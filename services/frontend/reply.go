package frontend

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"switchyard.dev/pkg/chat"
)

// replySink is a sink that also ends its API's answer: end writes what the
// turn's result completes (all of a non-streamed answer), and fail reports
// an error that came after a streamed answer began, in-band in the API's
// shape. Before that, and when not streaming, fail does nothing: nothing
// was written, so the handler answers with the error.
type replySink interface {
	sink
	headed
	end(res *turnResult) error
	fail(ae *apiError)
}

// reply runs the turn into out and ends the answer.
func (s *Service) reply(ctx context.Context, tr *turnRequest, out replySink) error {
	var into sink = out
	if s.cfg.ServerTiming && out.streamed() {
		into = trailered{out}
	}
	res, err := s.runTurn(ctx, tr, into)
	if err != nil {
		// A client that went away (499) has nobody left to tell.
		if ae := toAPIError(err); ae.Status != 499 {
			out.fail(ae)
		}
		return err
	}
	if s.cfg.ServerTiming {
		out.header().Set("Server-Timing", serverTiming(res, time.Since(tr.start)))
	}
	return out.end(res)
}

// headed is a sink whose answer's header reply can reach: an answer that is
// not streamed sends it at its end; a streamed one with its first token,
// before any timing is known, so Server-Timing follows it as an HTTP
// trailer (trailered). A stream that fails after it began ends without the
// trailer's value.
type headed interface {
	header() http.Header
	streamed() bool
}

// trailered is a streamed answer that declares the Server-Timing trailer
// as it begins, in the header its first token sends, so that clients know
// to expect it; a request answered with an error before that declares
// nothing.
type trailered struct{ replySink }

func (t trailered) begin(workerID string, promptTokens int) error {
	t.header().Set("Trailer", "Server-Timing")
	return t.replySink.begin(workerID, promptTokens)
}

// serverTiming is a Server-Timing value for a turn's answer, in
// milliseconds: route (the turn's Route calls: admission's wait, and the
// backoff and the other replicas tried while a scheduler answered
// UNAVAILABLE), engine (the answering worker's own time, from arrival to
// its last token, as the shim reports it; left out when it reports none)
// and total (from the request's arrival until the end of its answer is
// about to be written: reading and preparing the request, the attempts,
// streaming the answer so far, handing FinishRequest over; not writing a
// complete answer, or a stream's last events). What total has beyond the
// two is what the frontend, the shim and the hops between them add, and
// after a migration also the failed attempts' time.
func serverTiming(res *turnResult, total time.Duration) string {
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 3, 64) }
	var b strings.Builder
	b.WriteString("route;dur=" + ms(res.routing))
	if res.engine > 0 {
		b.WriteString(", engine;dur=" + ms(res.engine))
	}
	b.WriteString(", total;dur=" + ms(total))
	return b.String()
}

// collected gathers a non-streamed answer, which its API's end writes
// whole.
type collected struct {
	w      http.ResponseWriter
	text   strings.Builder
	reason strings.Builder
}

// header is the answer's header, written with it at its end (headed).
func (c *collected) header() http.Header { return c.w.Header() }
func (c *collected) streamed() bool      { return false }

func (c *collected) begin(workerID string, _ int) error {
	c.w.Header().Set(workerHeader, workerID)
	return nil
}
func (c *collected) content(t string) error       { c.text.WriteString(t); return nil }
func (c *collected) reasoning(t string) error     { c.reason.WriteString(t); return nil }
func (c *collected) toolCall(chat.ToolCall) error { return nil }
func (c *collected) fail(*apiError)               {}
