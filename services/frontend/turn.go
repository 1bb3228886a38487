package frontend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	agentv1 "switchyard.dev/gen/switchyard/agent/v1"
	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/agentctx"
	"switchyard.dev/pkg/chat"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/kvwire"
)

// turnRequest is one generation, independent of the API it came from.
type turnRequest struct {
	api       string
	requestID string
	tenant    string
	agent     agentctx.AgentContext
	conv      *chat.Conversation
	maxTokens int64 // 0 = default
	// maxTokensParam is the field maxTokens came from, as the client's API
	// names it: errors about the cap blame that field.
	maxTokensParam string
	temp           *float64
	topP           *float64
	seed           *int64
	start          time.Time
	// callPrefix prefixes the ids of tool calls ("call_", "toolu_", "fc_").
	callPrefix string
	stops      []string // stop sequences: the answer ends before the first
	model      string   // as the client named it, for traces
	xRequestID string   // the client's x-request-id, for traces
	// sched is the scheduler replica that routed the turn, which its
	// FinishRequest and MarkPrefillComplete go to.
	sched schedulerv1.SchedulerServiceClient
}

// sink receives a turn's output in the order it happens. begin is called
// once the worker is known and before any output, so that headers (the
// X-Switchyard-Worker header among them) go out before the first byte.
type sink interface {
	begin(workerID string, promptTokens int) error
	content(text string) error
	// reasoning is the model's thinking (the inside of a leading
	// <think> block); it always comes before any content or call.
	reasoning(text string) error
	toolCall(tc chat.ToolCall) error
}

// turnResult is how a turn ended.
type turnResult struct {
	workerID     string
	finish       string // stop, length, tool_calls
	promptTokens int64
	completion   int64
	cached       int64
	toolCalls    []chat.ToolCall
	stopSequence string // the stop sequence that ended the answer, if any
	// migrations are the attempts that failed before the first token, each
	// moved to another worker; workerID is the last attempt's.
	migrations []migration
	// ttft is from the turn's arrival to its first token (0: none).
	ttft time.Duration
	// routing is the time the turn's Route calls took, admission's wait and
	// the retries' backoff included; engine the answering worker's own time,
	// from the request's arrival at the engine to its last token (0: the
	// engine gave none).
	routing, engine time.Duration
}

// prepared is a turn ready to route: its prompt, the preprocessing it
// leaves the session's next turn (nil without a session), and where the
// session's previous prompt is held whole when this one repeats its leading
// blocks (nil otherwise).
type prepared struct {
	chat.Tokenized
	next *chat.Session
	base *sentPrompt
	// chainBase names the leading blocks of the session's previous chain,
	// which its scheduler replica kept (nil: none).
	chainBase *routedChain
}

// prepare renders and tokenizes a turn, reusing the session's previous turn.
func (s *Service) prepare(tr *turnRequest) (prepared, error) {
	h := s.hasher(tr.tenant)
	key := sessionKey(tr.tenant, tr.agent.SessionID)
	var p prepared
	var from *chat.Session
	err := reuse(s.sessions, key, tr.agent.Final(), promptOf,
		func(prev *chat.Session) (next *chat.Session, err error) {
			start := time.Now()
			p.Tokenized, next, err = chat.Prepare(s.template, s.tok, h, tr.conv, prev)
			if err != nil {
				return nil, &apiError{Status: http.StatusBadRequest, Kind: "invalid_request_error", Message: err.Error()}
			}
			s.metrics.preprocess.Observe(time.Since(start).Seconds())
			from, p.next = prev, next
			return next, nil
		})
	if err != nil {
		return prepared{}, err
	}
	reused := p.ReusedTokens / s.cfg.BlockSize
	p.base = kept(s.sessions, key, sentOf).baseFor(from, reused)
	p.chainBase = kept(s.sessions, key, chainOf).baseFor(from, reused)
	return p, nil
}

// outputCap decides max_tokens within the context window: most, the most
// tokens the answer may have, and asked, the cap the engine is sent: none
// (0) when neither the client nor the operator set one, so that the
// engine's own context window decides (--max-context-tokens may be larger
// than the model's).
func (s *Service) outputCap(tr *turnRequest, promptTokens int) (most, asked int64, err error) {
	limit := int64(s.cfg.MaxContextTokens)
	// The field to blame, as the client's API names it.
	promptParam := "messages"
	if tr.api == apiResponses {
		promptParam = "input"
	}
	if int64(promptTokens) >= limit {
		return 0, 0, &apiError{Status: http.StatusBadRequest, Kind: "invalid_request_error", Code: "context_length_exceeded", Param: promptParam,
			Message: fmt.Sprintf("the prompt is %d tokens; this model's context window is %d tokens", promptTokens, limit)}
	}
	want := tr.maxTokens
	if want <= 0 {
		want = int64(s.cfg.DefaultMaxTokens)
	}
	room := limit - int64(promptTokens)
	if want > room {
		if tr.maxTokens > 0 {
			return 0, 0, &apiError{Status: http.StatusBadRequest, Kind: "invalid_request_error", Code: "context_length_exceeded", Param: tr.maxTokensParam,
				Message: fmt.Sprintf("prompt (%d tokens) plus %s (%d) exceeds the context window of %d tokens", promptTokens, tr.maxTokensParam, tr.maxTokens, limit)}
		}
		want = room
	}
	if want <= 0 {
		return room, 0, nil
	}
	return want, want, nil
}

func (s *Service) agentProto(tr *turnRequest) *agentv1.AgentContext {
	a := &agentv1.AgentContext{
		SessionId:       tr.agent.SessionID,
		ParentSessionId: tr.agent.ParentSessionID,
		SessionFinal:    tr.agent.Final(),
		Tenant:          tr.tenant,
		Harness:         string(tr.agent.Harness),
		Compaction:      tr.agent.Compaction != nil,
	}
	switch tr.agent.InputTrigger {
	case agentctx.TriggerUserMessage:
		a.InputTrigger = agentv1.InputTrigger_INPUT_TRIGGER_USER_MESSAGE
	case agentctx.TriggerToolResult:
		a.InputTrigger = agentv1.InputTrigger_INPUT_TRIGGER_TOOL_RESULT
	case agentctx.TriggerOther:
		a.InputTrigger = agentv1.InputTrigger_INPUT_TRIGGER_OTHER
	}
	return a
}

// runTurn routes a turn, streams it from the chosen worker into out and
// reports its end to the scheduler, whatever happens (a client that goes
// away cancels ctx, which cancels the generation and frees its KV).
func (s *Service) runTurn(ctx context.Context, tr *turnRequest, out sink) (*turnResult, error) {
	tk, err := s.prepare(tr)
	if err != nil {
		return nil, err
	}
	maxTokens, asked, err := s.outputCap(tr, len(tk.Tokens))
	if err != nil {
		return nil, err
	}
	agent := s.agentProto(tr)
	hashes := kvwire.Uint64s(tk.Hashes)
	rreq := &schedulerv1.RouteRequest{
		RequestId:    tr.requestID,
		Agent:        agent,
		BlockSize:    uint32(s.cfg.BlockSize),
		BlockHashes:  hashes,
		PromptTokens: uint32(len(tk.Tokens)),
		MaxTokens:    uint32(asked),
		Continued:    tr.conv.HasRole(chat.RoleAssistant),
	}
	res := &turnResult{finish: "stop", promptTokens: int64(len(tk.Tokens))}
	greq := &enginev1.GenerateRequest{
		RequestId:   tr.requestID,
		Agent:       agent,
		TokenIds:    tk.Tokens,
		BlockHashes: hashes,
		CacheSalt:   cacheSalt(tr.tenant),
		Sampling: &enginev1.SamplingParams{
			MaxTokens:    uint32(asked),
			StopTokenIds: s.stopIDs,
			Stop:         tr.stops,
		},
	}
	if tr.temp != nil {
		greq.Sampling.Temperature = proto.Float32(float32(*tr.temp))
	}
	if tr.topP != nil {
		greq.Sampling.TopP = float32(*tr.topP)
	}
	if tr.seed != nil {
		greq.Sampling.Seed = *tr.seed
	}
	if s.cfg.SimToolCalls && len(tr.conv.Tools) > 0 && tr.agent.InputTrigger == agentctx.TriggerUserMessage {
		_, text := chat.SimulatedToolCall(tr.conv.Tools[0])
		greq.ToolCallTokenIds = s.tok.EncodeOrdinary(text)
	}
	at := &attempts{s: s, tr: tr, agent: agent, rreq: rreq, greq: greq, res: res,
		prompt: tk.Tokens, hashes: tk.Hashes, maxTokens: maxTokens, toolCall: greq.ToolCallTokenIds,
		whole: tk.Tokens, wholeHashes: hashes, base: tk.base, chainBase: tk.chainBase}
	finishReason := enginev1.FinishReason_FINISH_REASON_ABORT
	var firstAt time.Time
	var prefilled <-chan struct{} // closed when the first-token report is done
	defer func() {
		if !at.routed && res.workerID == "" {
			return // never routed: nothing to report or record
		}
		s.trace(tr, tk.Tokenized, res, finishReason, firstAt)
		if prefilled != nil {
			<-prefilled // the report goes first, and no goroutine outlives the turn
		}
		// Always tell the scheduler, even when the client left: it frees the
		// load the route added and moves the program on.
		if !firstAt.IsZero() {
			res.ttft = firstAt.Sub(tr.start)
		}
		if at.routed {
			s.finishTurn(ctx, tr, agent, res, finishReason, at.workerFailed)
		}
		s.metrics.tokens.WithLabelValues("prompt").Add(float64(res.promptTokens))
		s.metrics.tokens.WithLabelValues("completion").Add(float64(res.completion))
		s.metrics.tokens.WithLabelValues("cached").Add(float64(res.cached))
	}()

	gctx, gcancel := context.WithCancel(ctx)
	defer gcancel()
	// The worker's first message carries its first token, and nothing has
	// reached the client before it (begin has not run): an attempt that
	// fails before it moves to another worker unseen.
	defer at.stop()
	stream, first, err := at.start(ctx, gctx)
	if err != nil {
		return nil, err
	}
	if kept := at.chainKept; kept.key != 0 && tk.next != nil {
		kept.of = tk.next
		keep(s.sessions, sessionKey(tr.tenant, tr.agent.SessionID), chainOf, &kept, tk.next)
	}
	if err := out.begin(res.workerID, len(tk.Tokens)); err != nil {
		return res, err
	}
	answer := chat.NewAnswer(s.tok, tr.stops, s.stopIDs, len(tr.conv.Tools) > 0)
	// show sends one part of the answer to the client; tool calls get their
	// ids here, in the API's style.
	show := func(p chat.AnswerPart) error {
		switch {
		case p.Reasoning != "":
			return out.reasoning(p.Reasoning)
		case p.ToolCall != nil:
			tc := *p.ToolCall
			prefix := tr.callPrefix
			if prefix == "" {
				prefix = "call_"
			}
			tc.ID = newID(prefix)
			res.toolCalls = append(res.toolCalls, tc)
			return out.toolCall(tc)
		default:
			return out.content(p.Content)
		}
	}
	firstToken := true   // of the turn: TTFT
	attemptFirst := true // of the current attempt: its prefill is done
	var sent []uint32    // every output token so far, carried by a migration
	msg := first
	for {
		switch k := msg.GetKind().(type) {
		case *enginev1.GenerateResponse_Delta:
			for _, id := range k.Delta.GetTokenIds() {
				res.completion++
				sent = append(sent, id)
				if firstToken {
					firstToken = false
					firstAt = time.Now()
					s.metrics.ttft.WithLabelValues(tr.api).Observe(time.Since(tr.start).Seconds())
				}
				if attemptFirst {
					attemptFirst = false
					if prefilled != nil {
						<-prefilled // the failed attempt's report
					}
					prefilled = s.markPrefillComplete(ctx, tr)
				}
				if err := answer.Token(id, show); err != nil {
					return res, err
				}
			}
		case *enginev1.GenerateResponse_Result:
			r := k.Result
			if err := answer.Finish(show); err != nil {
				return res, err
			}
			if u := r.GetUsage(); u != nil {
				// A continued attempt's prompt carried the tokens sent before
				// it: the client's prompt is the turn's own, its completion
				// every token it got, its cached tokens those of its own
				// prompt found in the finishing worker's cache.
				res.promptTokens = int64(u.GetPromptTokens()) - int64(at.carried)
				res.completion = int64(at.carried) + int64(u.GetCompletionTokens())
				res.cached = min(int64(u.GetCachedTokens()), res.promptTokens)
			}
			finishReason = r.GetFinishReason()
			res.engine = time.Duration(r.GetTiming().GetTotalMs() * float64(time.Millisecond))
			if key := r.GetPromptKept(); key != 0 && tk.next != nil {
				keep(s.sessions, sessionKey(tr.tenant, tr.agent.SessionID), sentOf,
					&sentPrompt{holder: res.workerID, key: key, blocks: len(at.wholeHashes), of: tk.next}, tk.next)
			}
			res.stopSequence = answer.StopSequence()
			res.finish = answer.FinishReason(finishReason == enginev1.FinishReason_FINISH_REASON_LENGTH)
			return res, nil
		}
		var err error
		if msg, err = at.recv(stream); err != nil {
			if err == io.EOF {
				err = status.Error(codes.Unavailable, "worker ended the stream without a result")
			}
			// The next worker continues after the tokens already sent.
			if stream, msg, err = at.migrate(ctx, gctx, fmt.Errorf("generate: %w", err), sent); err != nil {
				return res, err
			}
			attemptFirst = true
		}
	}
}

// route asks the scheduler where a turn goes, within the route timeout
// (admission may hold the turn that long): the turn's owner among the
// replicas, or the next owners while it answers UNAVAILABLE (schedulers.go).
// While every replica answers UNAVAILABLE (restarting, or no worker live) it
// asks again, backing off,
// until *retryUntil (set at the request's first such answer, the retry
// budget later; never past the route deadline); then the client is told to
// come back in a second. ResourceExhausted, the scheduler shedding load, is
// never retried: it carries its own delay for the client.
func (s *Service) route(ctx context.Context, tr *turnRequest, req *schedulerv1.RouteRequest, base *routedChain, retryUntil *time.Time) (*schedulerv1.RouteResponse, error) {
	rctx, cancel := context.WithTimeout(ctx, s.cfg.RouteTimeout)
	defer cancel()
	var order []int
	for attempt := 0; ; attempt++ {
		// The owner, or while it does not answer the next owners in turn
		// (ordered again at every attempt: a replica may be back).
		order = s.scheds.order(ownerKey(tr), order)
		var resp *schedulerv1.RouteResponse
		var err error
		for _, i := range order {
			tr.sched = s.scheds.clients[i]
			// The next replica on UNAVAILABLE (this one is down), and on
			// FAILED_PRECONDITION (it knows no worker but those the turn
			// failed on; another replica may know more).
			err = s.scheds.watched(rctx, i, func(ctx context.Context) (err error) {
				resp, err = s.routeOnce(ctx, tr.sched, req, base)
				return err
			})
			if c := status.Code(err); c != codes.Unavailable && c != codes.FailedPrecondition || rctx.Err() != nil {
				break
			}
		}
		code := status.Code(err)
		if code == codes.ResourceExhausted {
			// Counted apart so shedding is not lost among the other 429s of
			// requests_total.
			s.metrics.shed.WithLabelValues(tr.api).Inc()
		}
		if code == codes.DeadlineExceeded && ctx.Err() == nil {
			// Admission held the turn for the whole route timeout: the fleet
			// is full, which the client should hear as such.
			s.metrics.rejected.WithLabelValues(tr.api, "route_timeout").Inc()
			return nil, &apiError{Status: http.StatusServiceUnavailable, Kind: "overloaded_error", RetryAfter: time.Second,
				Message: fmt.Sprintf("no worker could take the turn within %v; retry shortly", s.cfg.RouteTimeout)}
		}
		if code != codes.Unavailable || s.cfg.RouteRetryBudget < 0 || ctx.Err() != nil {
			if code == codes.InvalidArgument || code == codes.OutOfRange {
				// The request was validated before it was routed.
				return nil, fmt.Errorf("route: %w: %w", errMalformedCall, err)
			}
			if err != nil {
				return nil, fmt.Errorf("route: %w", err)
			}
			return resp, nil
		}
		now := time.Now()
		if retryUntil.IsZero() {
			*retryUntil = now.Add(s.cfg.RouteRetryBudget)
		}
		until := *retryUntil
		if d, ok := rctx.Deadline(); ok && d.Before(until) {
			until = d
		}
		wait := routeBackoff(attempt, rand.Float64())
		if now.Add(wait).After(until) {
			s.metrics.rejected.WithLabelValues(tr.api, "scheduler_unavailable").Inc()
			return nil, &apiError{Status: http.StatusServiceUnavailable, Kind: "overloaded_error", RetryAfter: time.Second,
				Message: "the scheduler is unavailable: " + upstreamMessage(status.Convert(err))}
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-rctx.Done():
			t.Stop()
			return nil, fmt.Errorf("route: %w", rctx.Err())
		}
	}
}

// routeOnce asks sched to route req, whose block hashes are its whole
// chain: only those past base when sched is the replica that kept it, and
// whole again at once when it no longer holds it (it restarted, or forgot
// it); whole to any other replica. req is as it came when routeOnce
// returns.
func (s *Service) routeOnce(ctx context.Context, sched schedulerv1.SchedulerServiceClient, req *schedulerv1.RouteRequest, base *routedChain) (*schedulerv1.RouteResponse, error) {
	if base == nil || base.holder != sched {
		return sched.Route(ctx, req)
	}
	whole := req.BlockHashes
	req.Base, req.BlockHashes = &kvv1.ChainBase{Key: base.key, Blocks: uint32(base.blocks)}, whole[base.blocks:]
	resp, err := sched.Route(ctx, req)
	req.Base, req.BlockHashes = nil, whole
	switch {
	case err == nil:
		s.metrics.chainBases.WithLabelValues("held").Inc()
	case status.Code(err) == codes.NotFound:
		s.metrics.chainBases.WithLabelValues("not_held").Inc()
		return sched.Route(ctx, req)
	}
	return resp, err
}

// Route retries back off from routeRetryMin, doubling up to routeRetryMax.
const (
	routeRetryMin = 50 * time.Millisecond
	routeRetryMax = time.Second
)

// routeBackoff is the wait before Route retry attempt+1, jittered by r in
// [0, 1): between half and all of the doubled delay, so frontends that lost
// the scheduler together do not come back together.
func routeBackoff(attempt int, r float64) time.Duration {
	d := routeRetryMax
	if attempt < 10 {
		d = min(routeRetryMin<<attempt, routeRetryMax)
	}
	return d/2 + time.Duration(r*float64(d/2))
}

// errDial: the chosen worker's shim address could not be dialed.
var errDial = errors.New("dial worker")

// finishTurn tells the scheduler how the turn's last attempt ended.
func (s *Service) finishTurn(ctx context.Context, tr *turnRequest, agent *agentv1.AgentContext, res *turnResult, reason enginev1.FinishReason, workerFailed bool) {
	names := make([]string, len(res.toolCalls))
	for i, tc := range res.toolCalls {
		names[i] = tc.Name
	}
	s.finishRequest(ctx, tr, &schedulerv1.FinishRequestRequest{
		WorkerId: res.workerID, Agent: agent,
		Usage:        &enginev1.Usage{PromptTokens: uint32(res.promptTokens), CompletionTokens: uint32(res.completion), CachedTokens: uint32(res.cached)},
		FinishReason: reason, ToolCallNames: names, WorkerFailed: workerFailed,
		TtftMs: float64(res.ttft.Microseconds()) / 1000,
	})
}

// finishRequest tells the scheduler a turn's attempt ended (req, with the
// turn's request id and its time so far filled in here): it frees the load
// the route added and moves the program on; WorkerFailed asks it to check
// the worker's health at once.
func (s *Service) finishRequest(ctx context.Context, tr *turnRequest, req *schedulerv1.FinishRequestRequest) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	req.RequestId = tr.requestID
	req.TotalMs = float64(time.Since(tr.start).Microseconds()) / 1000
	// A notice (servicekit.NoAnswer): the answer's end does not wait for
	// the scheduler's round trip. The client may send the session's next
	// turn through another frontend as soon as it has this answer; that
	// turn's Route can overtake this notice, and the scheduler makes it
	// wait for this finish (services/scheduler/predecessors.go) so that it
	// finds this turn's load freed and its program ACTING.
	if _, err := s.schedulerOf(tr).FinishRequest(fctx, req, servicekit.NoAnswer()); err != nil {
		s.log.WarnContext(ctx, "FinishRequest failed", "request_id", tr.requestID, "err", err)
	}
}

// markPrefillComplete tells the scheduler, off the streaming path, that the
// request's prompt is prefilled: the worker's prefill load drops now instead
// of when the turn ends. The returned channel closes when the call is done.
func (s *Service) markPrefillComplete(ctx context.Context, tr *turnRequest) <-chan struct{} {
	done := make(chan struct{})
	sched := s.schedulerOf(tr)
	go func() {
		defer close(done)
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := sched.MarkPrefillComplete(mctx, &schedulerv1.MarkPrefillCompleteRequest{RequestId: tr.requestID}, servicekit.NoAnswer()); err != nil {
			s.log.WarnContext(ctx, "MarkPrefillComplete failed", "request_id", tr.requestID, "err", err)
		}
	}()
	return done
}

// schedulerOf is the replica that routed tr (its owner before it is routed).
func (s *Service) schedulerOf(tr *turnRequest) schedulerv1.SchedulerServiceClient {
	if tr.sched != nil {
		return tr.sched
	}
	return s.scheds.clients[s.scheds.order(ownerKey(tr), nil)[0]]
}

// sessionKey scopes a session id by tenant ("" for no session).
func sessionKey(tenant, sessionID string) string {
	return agentctx.Scope(tenant, sessionID)
}

func unixNow() int64 { return time.Now().Unix() }
