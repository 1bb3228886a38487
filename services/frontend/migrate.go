package frontend

import (
	"context"
	"errors"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "switchyard.dev/gen/switchyard/agent/v1"
	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/services/servicekit/kvwire"
)

// migration is one attempt of a turn that failed on its worker and moved.
type migration struct {
	fromWorker string
	reason     string
	// afterTokens is how many output tokens the client had when the worker
	// failed: 0 before the first token; otherwise the next attempt's prompt
	// carried them.
	afterTokens int
}

// migrationReasons are the failures of a worker, or of the way to it, that
// move a turn elsewhere, as the migrations counter names them. The
// request's own faults (InvalidArgument, OutOfRange) would fail anywhere.
var migrationReasons = map[codes.Code]string{
	codes.Unavailable:      "unavailable",
	codes.Internal:         "internal",
	codes.Aborted:          "aborted",
	codes.DeadlineExceeded: "deadline_exceeded",
}

// migrationReason says why a failed attempt may move to another worker, ""
// when it may not (among them: the client went away).
func migrationReason(ctx context.Context, err error) string {
	if ctx.Err() != nil {
		return ""
	}
	if errors.Is(err, errDial) {
		return "dial"
	}
	var stall stalledError
	if errors.As(err, &stall) {
		return stall.reason
	}
	return migrationReasons[status.Code(err)]
}

// attempts runs a turn on one worker after another: the routed one, then,
// each time a worker fails, another one the scheduler picks without it, up
// to the migration limit. Before the first token the move is invisible to
// the client. After it, the next worker continues the answer: its prompt is
// the turn's prompt plus every token already sent and its budget what is
// left of max_tokens, so the client's stream goes on where it stopped.
type attempts struct {
	s     *Service
	tr    *turnRequest
	agent *agentv1.AgentContext
	rreq  *schedulerv1.RouteRequest
	greq  *enginev1.GenerateRequest
	res   *turnResult
	// prompt and hashes are the turn's own prompt and block hashes;
	// maxTokens its output budget and toolCall the simulated call asked of
	// the engine (nil when none).
	prompt    []uint32
	hashes    []kv.BlockHash
	maxTokens int64
	toolCall  []uint32
	// whole and wholeHashes are the current attempt's prompt (the turn's,
	// or after a migration the turn's and the tokens carried), which greq
	// carries whole or past base: where the session's previous prompt is
	// held whole, whose leading blocks this one repeats (nil: none, or the
	// worker no longer held it).
	whole       []uint32
	wholeHashes []uint64
	base        *sentPrompt
	// chainBase is where the session's previous chain is held whole, which
	// the attempt's Route names (nil: none); chainKept where the route kept
	// this one's (key 0: not kept).
	chainBase *routedChain
	chainKept routedChain
	// carried is how many output tokens the current attempt's prompt
	// carries (the tokens earlier attempts produced).
	carried int
	// routed: the scheduler holds load for res.workerID's attempt (a
	// migration finishes the failed attempt itself, and its next route may
	// fail).
	routed     bool
	retryUntil time.Time // the Route retry budget spans the turn's routes
	// workerFailed: the turn ends with its worker's failure, not migrated
	// (past the limit, or nothing left to generate).
	workerFailed bool
	watch        *watchdog // the current attempt's
}

// genStream is a worker's Generate stream for one attempt.
type genStream = grpc.ServerStreamingClient[enginev1.GenerateResponse]

// start routes the turn and opens its first attempt, migrating while
// workers fail before their first message.
func (a *attempts) start(ctx, gctx context.Context) (genStream, *enginev1.GenerateResponse, error) {
	st, first, failed, err := a.place(ctx, gctx)
	if failed != nil {
		return a.migrate(ctx, gctx, failed, nil)
	}
	return st, first, err
}

// place routes the turn and opens an attempt on the worker the scheduler
// picks. err is the route's failure, which ends the turn; failed the
// worker's, which the turn may migrate from.
func (a *attempts) place(ctx, gctx context.Context) (st genStream, first *enginev1.GenerateResponse, failed, err error) {
	start := time.Now()
	route, err := a.s.route(ctx, a.tr, a.rreq, a.chainBase, &a.retryUntil)
	a.res.routing += time.Since(start)
	if err != nil {
		return nil, nil, nil, err
	}
	a.chainKept = routedChain{holder: a.tr.sched, key: route.GetChainKept(), blocks: len(a.rreq.GetBlockHashes())}
	a.routed = true
	a.res.workerID = route.GetWorkerId()
	a.greq.Priority, a.greq.RetentionSeconds = route.GetPriority(), route.GetRetentionSeconds()
	based := a.shape()
	st, first, failed = a.open(gctx, route.GetWorkerAddress())
	if based && status.Code(failed) == codes.NotFound {
		// The shim no longer holds the base (it forgot it, or restarted):
		// the same worker, sent the whole prompt.
		a.s.metrics.bases.WithLabelValues("not_held").Inc()
		a.base = nil
		a.shape()
		st, first, failed = a.open(gctx, route.GetWorkerAddress())
	}
	return st, first, failed, nil
}

// shape has greq carry the attempt's prompt past the base when the worker
// routed to is the one that holds it, else whole, and says which.
func (a *attempts) shape() bool {
	a.greq.Base, a.greq.TokenIds, a.greq.BlockHashes = nil, a.whole, a.wholeHashes
	b := a.base
	if b == nil || b.holder != a.res.workerID {
		return false
	}
	a.s.metrics.bases.WithLabelValues("sent").Inc()
	a.greq.Base = &enginev1.PromptBase{Key: b.key, Blocks: uint32(b.blocks)}
	a.greq.TokenIds, a.greq.BlockHashes = a.whole[b.blocks*a.s.cfg.BlockSize:], a.wholeHashes[b.blocks:]
	return true
}

// migrate moves the turn off the worker that failed with cause, after the
// client was sent the output tokens sent (nil: none). It returns the new
// attempt's stream and first message, or the error the client gets: cause
// itself when the failure is not a worker's or the limit is reached.
func (a *attempts) migrate(ctx, gctx context.Context, cause error, sent []uint32) (genStream, *enginev1.GenerateResponse, error) {
	for {
		reason := migrationReason(ctx, cause)
		if reason == "" {
			return nil, nil, cause
		}
		// Nothing is left to generate when the worker failed after its last
		// token but before its result: the turn then ends with the failure,
		// as without migration.
		if len(a.res.migrations) >= a.s.cfg.MigrationLimit || int64(len(sent)) >= a.maxTokens {
			a.workerFailed = true
			return nil, nil, cause
		}
		// A connection that failed waits out its reconnect backoff (up to a
		// second) before it tries again; a shim restarting on the same
		// address should be tried as soon as the next turn needs it.
		if a.watch != nil {
			a.watch.conn.conn.ResetConnectBackoff()
		}
		// The failed attempt ends as a cancelled turn (its load freed, no
		// step of the session, superseded: not a turn of its record) and the
		// scheduler checks the worker at once.
		a.s.finishRequest(ctx, a.tr, &schedulerv1.FinishRequestRequest{
			WorkerId: a.res.workerID, Agent: a.agent, Usage: &enginev1.Usage{PromptTokens: uint32(len(a.whole))},
			FinishReason: enginev1.FinishReason_FINISH_REASON_ABORT, WorkerFailed: true, Superseded: true,
		})
		a.routed = false
		a.res.migrations = append(a.res.migrations, migration{fromWorker: a.res.workerID, reason: reason, afterTokens: len(sent)})
		a.s.metrics.migrations.WithLabelValues(reason).Inc()
		a.s.log.WarnContext(ctx, "worker failed; migrating the request", "request_id", a.tr.requestID,
			"session_id", a.tr.agent.SessionID, "from_worker", a.res.workerID, "reason", reason,
			"after_tokens", len(sent), "err", cause)
		a.rreq.ExcludeWorkers = append(a.rreq.ExcludeWorkers, a.res.workerID)
		if len(sent) > a.carried {
			a.carry(sent)
		}
		st, first, failed, err := a.place(ctx, gctx)
		if err != nil && ctx.Err() == nil {
			// No worker took the turn over: it failed on every live one
			// (FAILED_PRECONDITION, at once), none is left, or the
			// scheduler could not say within the route retry budget. The
			// turn's last failure is the client's answer (its attempt was
			// reported above), not the routing's.
			a.s.log.WarnContext(ctx, "no worker took the failed request over", "request_id", a.tr.requestID, "err", err)
			return nil, nil, cause
		}
		if failed == nil {
			return st, first, err
		}
		cause = failed
	}
}

// carry makes the next attempt continue after the output tokens sent
// (fewer than maxTokens): the prompt becomes the turn's prompt plus sent
// (hashed as one sequence, so the indexes and the engine see the blocks the
// failed worker would have cached), the budget what is left of max_tokens.
func (a *attempts) carry(sent []uint32) {
	left := a.maxTokens - int64(len(sent))
	tokens := append(slices.Clip(a.prompt), sent...)
	h := a.s.hasher(a.tr.tenant)
	// Extend may append in place: the prompt's hashes are the session's.
	hashes := kvwire.Uint64s(h.Extend(slices.Clone(a.hashes), tokens))
	a.carried = len(sent)
	a.whole, a.wholeHashes = tokens, hashes
	if a.greq.Sampling.MaxTokens > 0 { // else the engine's context decides, the tokens sent now in it
		a.greq.Sampling.MaxTokens, a.rreq.MaxTokens = uint32(left), uint32(left)
	}
	a.rreq.BlockHashes, a.rreq.PromptTokens = hashes, uint32(len(tokens))
	if len(a.toolCall) > 0 {
		// The simulated engine ends its answer with the call's tokens; those
		// already sent are not asked again. (It writes new text before the
		// rest, so a call cut in the middle does not parse: a simulator
		// limit, real engines continue the text.)
		a.greq.ToolCallTokenIds = a.toolCall[sentCallPrefix(sent, a.toolCall):]
	}
}

// sentCallPrefix is how many leading tokens of call end sent.
func sentCallPrefix(sent, call []uint32) int {
	for n := min(len(sent), len(call)); n > 0; n-- {
		if slices.Equal(sent[len(sent)-n:], call[:n]) {
			return n
		}
	}
	return 0
}
