package frontend

import (
	"context"
	"net/http"
	"strings"

	"switchyard.dev/pkg/chat"
)

// replySink is a sink that also ends its API's answer: end writes what the
// turn's result completes (all of a non-streamed answer), and fail reports
// an error that came after a streamed answer began, in-band in the API's
// shape. Before that, and when not streaming, fail does nothing: nothing
// was written, so the handler answers with the error.
type replySink interface {
	sink
	end(res *turnResult) error
	fail(ae *apiError)
}

// reply runs the turn into out and ends the answer.
func (s *Service) reply(ctx context.Context, tr *turnRequest, out replySink) error {
	res, err := s.runTurn(ctx, tr, out)
	if err != nil {
		// A client that went away (499) has nobody left to tell.
		if ae := toAPIError(err); ae.Status != 499 {
			out.fail(ae)
		}
		return err
	}
	return out.end(res)
}

// collected gathers a non-streamed answer, which its API's end writes
// whole.
type collected struct {
	w      http.ResponseWriter
	text   strings.Builder
	reason strings.Builder
}

func (c *collected) begin(workerID string, _ int) error {
	c.w.Header().Set(workerHeader, workerID)
	return nil
}
func (c *collected) content(t string) error       { c.text.WriteString(t); return nil }
func (c *collected) reasoning(t string) error     { c.reason.WriteString(t); return nil }
func (c *collected) toolCall(chat.ToolCall) error { return nil }
func (c *collected) fail(*apiError)               {}
