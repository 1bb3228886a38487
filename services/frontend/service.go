package frontend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"

	frontendv1 "switchyard.dev/gen/switchyard/frontend/v1"
	"switchyard.dev/pkg/agentctx"
	"switchyard.dev/pkg/chat"
	"switchyard.dev/pkg/kvhash"
	"switchyard.dev/pkg/tokenizer"
	"switchyard.dev/services/frontend/console"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/tracefile"
)

// API names, used in metrics and to pick the error shape.
const (
	apiChat      = "chat_completions"
	apiResponses = "responses"
	apiMessages  = "messages"
	apiModels    = "models"
	apiConsole   = "console"
	apiOther     = "other" // a /v1/ path no API serves (OpenAI's error shape)
)

// Service is the frontend.
type Service struct {
	cfg      Config
	log      logger
	tok      tokenizer.Tokenizer
	template chat.Template
	stopIDs  []uint32    // end-of-turn tokens: stop generation, never shown
	scheds   *schedulers // the scheduler replicas (schedulers.go)
	workers  *connPool
	// inflight holds a token per generation request being served
	// (MaxInflight of them).
	inflight chan struct{}
	keys     *keyring
	limits   *tenantLimits
	// adminOpen: the admin API needs no key (no keys at all, loopback port).
	adminOpen bool
	// console gathers the console's state (console.go).
	console *consoleFeed
	// programLog is the programs' latest admission decisions, for the
	// console (console_programs.go).
	programLog *programLog
	// hintConn reaches the hint emitter, for the console (nil: none).
	hintConn *grpc.ClientConn
	// hintsOut logs an outage of the emitter's console calls once.
	hintsOut outage
	sessions *sessionTable
	metrics  *metrics
	created  int64 // model creation time shown by /v1/models (process start)
	// traces queues request-trace records for Run to write; nil when off.
	traces     *tracefile.Async
	traceFlush time.Duration
	now        func() int64
}

// New builds the frontend and registers its HTTP APIs, admin gRPC service and
// gateway on srv.
func New(cfg Config, srv *servicekit.Server) (*Service, error) {
	cfg = cfg.withDefaults()
	if cfg.MigrationLimit > maxMigrations {
		// The scheduler refuses a route that excludes more workers than
		// that: the move past it would fail the turn as the frontend's
		// own bad call.
		return nil, fmt.Errorf("frontend: --migration-limit %d: at most %d", cfg.MigrationLimit, maxMigrations)
	}
	keys, err := newKeyring(cfg.APIKeys, cfg.APIKeysFile)
	if err != nil {
		return nil, fmt.Errorf("frontend: api keys: %w", err)
	}
	cfg.APIKeys = nil // only the digests stay
	scheds, err := dialSchedulers(cfg.SchedulerAddr, srv.Dial)
	if err != nil {
		return nil, err
	}
	tok := tokenizer.Default()
	s := &Service{
		cfg:      cfg,
		log:      srv.Logger(),
		tok:      tok,
		template: chat.ChatML{},
		scheds:   scheds,
		workers:  newConnPool(srv.Dial),
		keys:     keys,
		limits:   newTenantLimits(cfg.TenantRPS, cfg.TenantStreams),
		// Without any key the admin API is open only when no port reaches
		// beyond loopback (switchyard up): its REST and gRPC sides alike.
		adminOpen: keys.empty() && srv.Loopback(),
		inflight:  make(chan struct{}, cfg.MaxInflight),
		sessions:  newSessionTable(cfg.MaxSessions),
		metrics:   newMetrics(srv.Registry(), srv.MetricName),
		now:       unixNow,
	}
	s.created = s.now()
	if keys.empty() && !srv.Loopback() {
		s.log.Warn("no API keys and a port beyond loopback: anyone who reaches the public API is served, as tenant " + AnonymousTenant + " (--api-keys-file)")
	}
	if cfg.KVHintEmitterAddr != "" {
		if s.hintConn, err = srv.Dial(cfg.KVHintEmitterAddr); err != nil {
			s.close()
			return nil, err
		}
	}
	if cfg.ChatTemplate != "" {
		t, err := loadTemplate(cfg.ChatTemplate, tok)
		if err != nil {
			s.close()
			return nil, err
		}
		s.template = t
	}
	if s.traces, s.traceFlush, err = openTraces(cfg, s.log); err != nil {
		s.close()
		return nil, err
	}
	if s.traces != nil {
		registerTraceMetrics(srv.Registry(), srv.MetricName, s.traces)
	}
	for _, t := range []string{"<|im_end|>", "<|endoftext|>"} {
		if id, ok := tok.SpecialID(t); ok {
			s.stopIDs = append(s.stopIDs, id)
		}
	}

	frontendv1.RegisterFrontendAdminServiceServer(srv, &admin{s: s})
	// Its profiles (--pprof), on the public port: an operator's, as the
	// admin API's unscoped view is.
	srv.GuardDebug(func(r *http.Request) bool {
		t, ok := s.tenantForKey(r.Header.Get("x-api-key"), r.Header.Get("Authorization"))
		return ok && t == OperatorTenant || !ok && s.adminOpen
	})
	srv.Gateway(registerAdminGateway)
	srv.HandleHTTP("POST /v1/chat/completions", s.handler(apiChat, s.bounded(apiChat, generation, s.serveChat)))
	srv.HandleHTTP("POST /v1/responses", s.handler(apiResponses, s.bounded(apiResponses, generation, s.serveResponses)))
	srv.HandleHTTP("POST /v1/messages", s.handler(apiMessages, s.bounded(apiMessages, generation, s.serveMessages)))
	srv.HandleHTTP("POST /v1/messages/count_tokens", s.handler(apiMessages, s.bounded(apiMessages, tokenCount, s.serveCountTokens)))
	srv.HandleHTTP("GET /v1/models", s.handler(apiModels, s.keyed(s.serveModels)))
	srv.HandleHTTP("GET /v1/models/{id}", s.handler(apiModels, s.keyed(s.serveModel)))
	s.console = newConsoleFeed(s)
	srv.OnDrain(func(context.Context) { close(s.console.drained) })
	s.programLog = newProgramLog(cfg.MaxSessions)
	// The page holds no data, so it needs no key (the page asks for one
	// when the state does); the state, the events and the traces do.
	srv.HandleHTTP("GET /console", console.Handler())
	srv.HandleHTTP("GET /console/", console.Handler())
	srv.HandleHTTP("GET /console/state", s.handler(apiConsole, s.serveConsoleState))
	srv.HandleHTTP("GET /console/events", s.handler(apiConsole, s.serveConsoleEvents))
	srv.HandleHTTP("GET /console/sessions/{tenant}/{session}/perfetto", s.handler(apiConsole, s.serveConsolePerfetto))
	// Any other method on an API path is a 405 in that API's shape (without
	// these, the admin gateway's catch-all would answer a gateway 404).
	for path, api := range map[string]string{
		"/v1/chat/completions": apiChat, "/v1/responses": apiResponses,
		"/v1/messages": apiMessages, "/v1/messages/count_tokens": apiMessages,
		"/v1/models": apiModels, "/v1/models/{id}": apiModels,
	} {
		srv.HandleHTTP(path, s.handler(api, methodNotAllowed))
	}
	// Any other /v1/ path (the legacy /v1/completions, /v1/embeddings, a
	// typo) is a 404 in its API's shape, as the upstream APIs answer it,
	// rather than the gateway's; the admin API's paths stay the gateway's.
	srv.HandleHTTP("/v1/", s.handler(apiOther, unknownPath))
	srv.HandleHTTP("/v1/messages/", s.handler(apiMessages, unknownPath))
	srv.HandleHTTP("/v1/admin/", srv.GatewayHandler())
	// Claude Code probes HEAD / before its first call; answer at once.
	srv.HandleHTTP("GET /{$}", http.HandlerFunc(serveRoot))
	srv.OnShutdown(func(context.Context) { s.close() })
	return s, nil
}

// Run writes request-trace records, when tracing is on, and follows the
// schedulers' program events for the console, until ctx ends; the frontend
// is otherwise request-driven.
func (s *Service) Run(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.watchPrograms(ctx)
	}()
	err := s.runTraces(ctx)
	<-done
	return err
}

func (s *Service) close() {
	s.workers.close()
	s.scheds.close()
	if s.hintConn != nil {
		s.hintConn.Close()
	}
}

// methodNotAllowed answers a request whose method its path does not serve
// (the method-specific patterns are more specific, so they win).
func methodNotAllowed(w http.ResponseWriter, r *http.Request) error {
	allow := http.MethodPost
	if strings.HasPrefix(r.URL.Path, "/v1/models") {
		allow = "GET, HEAD"
	}
	w.Header().Set("Allow", allow)
	return &apiError{Status: http.StatusMethodNotAllowed, Kind: "invalid_request_error",
		Message: fmt.Sprintf("%s %s is not supported; use %s", r.Method, r.URL.Path, allow)}
}

// unknownPath answers a path no API serves.
func unknownPath(_ http.ResponseWriter, r *http.Request) error {
	return &apiError{Status: http.StatusNotFound, Kind: "not_found_error",
		Message: fmt.Sprintf("Invalid URL (%s %s): this frontend serves POST /v1/chat/completions, /v1/responses, /v1/messages, /v1/messages/count_tokens and GET /v1/models", r.Method, r.URL.Path)}
}

func serveRoot(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if r.Method == http.MethodHead {
		return
	}
	io.WriteString(w, "Switchyard frontend: POST /v1/chat/completions, /v1/responses, /v1/messages; GET /v1/models\n")
}

// handler wraps an API handler: body limit, error shape, panic safety and
// the request counter.
func (s *Service) handler(api string, h func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		shape := errorShape(api, r)
		defer func() {
			p := recover()
			if p != nil && p != http.ErrAbortHandler {
				s.log.ErrorContext(r.Context(), "panic in handler", "api", api, "panic", fmt.Sprint(p))
				if !sw.wrote {
					writeError(sw, shape, &apiError{Status: http.StatusInternalServerError, Kind: "server_error", Message: "internal error"})
				}
			}
			s.metrics.requests.WithLabelValues(api, fmt.Sprint(sw.statusCode())).Inc()
			if p == http.ErrAbortHandler {
				panic(p) // net/http drops the connection (or the stream), quietly
			}
		}()
		r, done := withRequestBodies(r)
		defer done()
		body := r.Body
		r.Body = http.MaxBytesReader(sw, servicekit.LimitBodyTime(sw, r, s.cfg.BodyReadTimeout), s.cfg.MaxBodyBytes)
		if err := h(sw, r); err != nil {
			ae := toAPIError(err)
			switch {
			case ae.Status == 499: // the client left: nothing to say
			case ae.Status >= 500:
				s.log.WarnContext(r.Context(), "request failed", "api", api, "status", ae.Status, "err", err)
			default:
				// The client's own fault: once, at INFO, by what the client was
				// told but its message, which may quote the request's content
				// (a role, a block type, a tool's name): logs hold none.
				s.log.InfoContext(r.Context(), "request rejected", "api", api, "status", ae.Status,
					"type", ae.kindFor(api), "param", ae.Param, "code", ae.Code)
			}
			if sw.wrote {
				return // streaming already began; the handler reported in-band
			}
			if ae.Status == 499 {
				// Nobody to tell, and no answer either: returning would
				// have net/http send an empty 200, which a client that only
				// closed its sending side would read as a success.
				sw.status = 499
				panic(http.ErrAbortHandler)
			}
			if ae.Status == http.StatusRequestEntityTooLarge {
				s.rejectOversize(sw, r, api, ae, body)
				return
			}
			writeError(sw, shape, ae)
		}
	})
}

// errorShape is the API whose error JSON answers r: the model list is both
// APIs', and an Anthropic client says it is one by its anthropic-version.
func errorShape(api string, r *http.Request) string {
	if api == apiModels && r.Header.Get("anthropic-version") != "" {
		return apiMessages
	}
	return api
}

// requestKind is what a bounded request asks for.
type requestKind int

const (
	generation requestKind = iota // a completion: counted with its tenant's generations at once
	tokenCount                    // a token count: a body tokenized, nothing generated
)

// bounded admits a request that reads a body only while fewer than
// MaxInflight are being served (past it the client is told at once to come
// back: 503 with Retry-After, in its API's shape, rather than queued without
// bound), and only within its tenant's limits (429 with Retry-After): its
// requests per second, and for a generation its generations at once.
func (s *Service) bounded(api string, kind requestKind, h func(w http.ResponseWriter, r *http.Request) error) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		select {
		case s.inflight <- struct{}{}:
		default:
			s.metrics.rejected.WithLabelValues(api, "inflight").Inc()
			return &apiError{Status: http.StatusServiceUnavailable, Kind: "overloaded_error", RetryAfter: time.Second,
				Message: fmt.Sprintf("this frontend is serving its limit of %d requests; retry shortly", cap(s.inflight))}
		}
		defer func() { <-s.inflight }()
		tenant, err := s.tenantOf(r)
		if err != nil {
			return err
		}
		release, refused, retry := s.limits.acquire(tenant, kind == generation)
		if refused != "" {
			s.metrics.rejected.WithLabelValues(api, refused).Inc()
			what := "requests per second"
			if refused == "tenant_streams" {
				what = "generations at once"
			}
			return &apiError{Status: http.StatusTooManyRequests, Kind: "rate_limit_error", RetryAfter: retry,
				Message: fmt.Sprintf("tenant %s is over its limit of %s; retry later", tenant, what)}
		}
		defer release()
		if r.ContentLength > s.cfg.MaxBodyBytes {
			// Too large by its own account: refused before a byte of it is
			// read, so net/http never sends the 100 Continue a client may be
			// waiting for; after the key and the limits, whose refusals
			// come first, so that only an admitted client's body is drained
			// (rejectOversize).
			return &http.MaxBytesError{Limit: s.cfg.MaxBodyBytes}
		}
		return h(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant)))
	}
}

// keyed lets a request through when keys are configured only with a valid
// one: a tenant's, or an operator's, which may list what the fleet serves
// though it may not use it. The model list is not a generation, so it
// counts against no limit, but like OpenAI's and Anthropic's it is not
// public: the names of an operator's models are theirs to publish.
func (s *Service) keyed(h func(w http.ResponseWriter, r *http.Request) error) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		if s.keys.tenants {
			if _, ok := s.tenantForKey(r.Header.Get("x-api-key"), r.Header.Get("Authorization")); !ok {
				return unauthorized("missing or invalid API key")
			}
		}
		return h(w, r)
	}
}

// oversizeDrainTime bounds how long rejectOversize reads a body it rejected.
const oversizeDrainTime = 10 * time.Second

// rejectOversize answers a body over MaxBodyBytes with its 413 and then
// reads (and drops) the rest of the body, so that the body read in all is
// at most twice MaxBodyBytes, within oversizeDrainTime. net/http does not
// read what a handler left of a body that large: it closes the connection
// with the client still sending, and closing a socket with unread data
// resets it, so a client that sends its whole body before it reads gets a
// broken pipe, and many TCP stacks drop the unread 413 with the reset (see
// net/http's closeWriteAndWait). Read to its end, the body is gone and the
// close is a clean one; "Connection: close" tells the client that the
// connection ends there. Only a body over twice the limit, or one that
// trickles in past the deadline, is cut off.
//
// A body refused by its Content-Length (none of it read) is read only when
// it can be read to its end: not when it is over twice the limit (it would
// be cut off anyway), nor when the client waits for a 100 Continue before
// sending it (it will not come: the client reads the 413 instead).
func (s *Service) rejectOversize(w *statusWriter, r *http.Request, api string, ae *apiError, body io.Reader) {
	w.Header().Set("Connection", "close")
	writeError(w, api, ae)
	drain := s.cfg.MaxBodyBytes // what is left to read of a body read up to the limit
	if n := r.ContentLength; n > s.cfg.MaxBodyBytes {
		if n-s.cfg.MaxBodyBytes > s.cfg.MaxBodyBytes || strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
			return
		}
		drain = n
	}
	w.Flush() // the answer goes out first, for clients that read while they send
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(oversizeDrainTime))
	io.CopyN(io.Discard, body, drain)
}

// statusWriter remembers whether and what was written; it passes Flush on.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		if !w.wrote {
			w.status, w.wrote = http.StatusOK, true
		}
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) statusCode() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// readRequest reads what every inference API starts from into the turn the
// request asks for: the tenant (API key), the agent identity (headers) and
// the body (size-limited), decoded by the API's decode. decode reuses what
// the previous body of the session the headers name left (see
// chat.PrevBody), and what this body leaves is kept for the session's next
// (see reuse). A session named only in the body is known after decoding,
// too late: its bodies are decoded whole.
func readRequest[R any](s *Service, r *http.Request, api string,
	decode func(body []byte, prev *chat.PrevBody) (*R, *chat.PrevBody, error)) (*turnRequest, *R, error) {
	tr := &turnRequest{api: api, start: time.Now(), xRequestID: r.Header.Get("x-request-id")}
	var err error
	if tr.tenant, err = s.tenantOf(r); err != nil {
		return nil, nil, err
	}
	if tr.agent, err = agentctx.FromHeaders(r.Header); err != nil {
		return nil, nil, err
	}
	buf := requestBody(r, s.cfg.MaxBodyBytes)
	body, err := readBody(r, s.cfg.MaxBodyBytes, buf)
	if err != nil {
		return nil, nil, err
	}
	var req *R
	if err := reuseBody(s.sessions, sessionKey(tr.tenant, tr.agent.SessionID), tr.agent.Final(), buf,
		func(prev *chat.PrevBody) (next *chat.PrevBody, err error) {
			req, next, err = decode(body, prev)
			return next, err
		}); err != nil {
		return nil, nil, err
	}
	return tr, req, nil
}

// tenantOf authenticates a request: the API key from Authorization: Bearer
// or x-api-key selects the tenant; in anonymous mode every request is the
// anonymous tenant's and keys are ignored.
func (s *Service) tenantOf(r *http.Request) (string, error) {
	if t, ok := r.Context().Value(tenantKey{}).(string); ok {
		return t, nil // authenticated already (bounded)
	}
	if !s.keys.tenants {
		return AnonymousTenant, nil
	}
	t, ok := s.tenantForKey(r.Header.Get("x-api-key"), r.Header.Get("Authorization"))
	if ok && t != OperatorTenant {
		return t, nil
	}
	msg := "missing or invalid API key"
	if ok {
		msg = "an operator key serves the admin API only, not inference"
	}
	return "", unauthorized(msg)
}

// unauthorized is a 401 for a request without a key it needs, in the API's
// shape (OpenAI's code invalid_api_key, Anthropic's authentication_error).
func unauthorized(msg string) *apiError {
	return &apiError{Status: http.StatusUnauthorized, Kind: "authentication_error", Code: "invalid_api_key", Message: msg}
}

// tenantKey carries a request's tenant once bounded has authenticated it.
type tenantKey struct{}

// tenantForKey maps the key of an x-api-key value, or else of an
// "Authorization: Bearer" value, to its tenant (OperatorTenant for an
// operator's key).
func (s *Service) tenantForKey(apiKey, authorization string) (string, bool) {
	key := strings.TrimSpace(apiKey)
	if key == "" && len(authorization) > 7 && strings.EqualFold(authorization[:7], "bearer ") {
		key = strings.TrimSpace(authorization[7:])
	}
	return s.keys.lookup(key)
}

// cacheSalt is the tenant's salt for block hashes: tenants never share KV
// prefixes (the anonymous tenant uses the unsalted hashes).
func cacheSalt(tenant string) string {
	if tenant == AnonymousTenant {
		return ""
	}
	return "tenant:" + tenant
}

// hasher hashes the blocks of a tenant's tokens: in the frontend's block
// size, salted by the tenant.
func (s *Service) hasher(tenant string) kvhash.Hasher {
	return kvhash.New(s.cfg.BlockSize, "", cacheSalt(tenant))
}

func newID(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// errPoolClosed: the frontend is shutting down; no new shim streams.
var errPoolClosed = errors.New("frontend: shutting down")

// BuiltinQwen3Template as --chat-template selects the real Qwen3 chat
// template embedded with the default tokenizer (no file needed).
const BuiltinQwen3Template = "qwen3"

// loadTemplate reads a model's chat template from a .jinja file or a
// tokenizer_config.json (then its bos/eos tokens are template variables).
func loadTemplate(path string, tok tokenizer.Tokenizer) (chat.Template, error) {
	isSpecial := func(s string) bool { _, ok := tok.SpecialID(s); return ok }
	if path == BuiltinQwen3Template {
		// The template that goes with the embedded tokenizer; it reads no
		// bos/eos variables.
		return chat.NewJinjaTemplate(tokenizer.DefaultChatTemplate(), isSpecial, nil)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("frontend: chat template: %w", err)
	}
	src, vars := string(b), map[string]string{}
	if strings.HasSuffix(path, ".json") {
		if src, err = chat.TemplateFromConfig(b); err != nil {
			return nil, err
		}
		var cfg map[string]json.RawMessage
		json.Unmarshal(b, &cfg)
		for _, k := range []string{"bos_token", "eos_token", "pad_token", "unk_token"} {
			var s string
			var obj struct {
				Content string `json:"content"`
			}
			if json.Unmarshal(cfg[k], &s) == nil {
				vars[k] = s
			} else if json.Unmarshal(cfg[k], &obj) == nil && obj.Content != "" {
				vars[k] = obj.Content
			}
		}
	}
	return chat.NewJinjaTemplate(src, isSpecial, vars)
}
