package servicekit

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// The order of everything a gRPC call passes through, outermost first, written down
// here once:
//
//  1. trace stats handler (grpc.StatsHandler, always outside the interceptors):
//     extracts the caller's W3C trace context and, while spans may be recorded,
//     opens otelgrpc's server span, so every log line and metric below happens
//     inside it (traceGRPC).
//  2. in-flight count: outermost of the interceptors, so that it covers the whole
//     handler; it is what shutdown's drain reports and, after a cut, waits on.
//  3. metrics: counts every call with the status code the client finally sees.
//  4. logging: one line per finished call (method, code, duration, trace id), at DEBUG
//     when it succeeded (see callLog); an error is logged here once, at the boundary,
//     and nowhere else. Health checks are not logged.
//  5. recovery: innermost, so a panic in a handler becomes codes.Internal before
//     logging and metrics see the call; its stack is logged once, here.
//
// HTTP (gateway and HandleHTTP routes) goes: in-flight count → otelhttp (W3C
// traceparent) → metrics → panic recovery (a panic becomes a counted, traced 500;
// an abort, http.ErrAbortHandler, a counted 499 that net/http then drops) →
// mux; gateway routes then re-enter at (1) through the loopback connection. While
// no tracer provider is installed (no exporter: SetupTelemetry), otelhttp's span,
// which nothing would record, is not built: the caller's traceparent alone is
// taken into the request's context, for the logs' trace ids and the calls onward.

// rpcMetrics are the per-server request metrics, registered on the server's registry.
type rpcMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	httpReqs *prometheus.CounterVec
	httpDur  *prometheus.HistogramVec
}

func newRPCMetrics(reg prometheus.Registerer, prefix string) *rpcMetrics {
	m := &rpcMetrics{}
	m.requests, m.duration = requestMetrics(prefix+"_grpc",
		"gRPC calls handled, by full method and status code.",
		"Time from the start of a gRPC call to its status (whole stream for streaming calls).")
	m.httpReqs, m.httpDur = requestMetrics(prefix+"_http",
		"HTTP requests handled, by method and status code.",
		"Time to handle an HTTP request (whole response for streams).")
	reg.MustRegister(m.requests, m.duration, m.httpReqs, m.httpDur)
	return m
}

// requestMetrics are one protocol's <prefix>_requests_total, by method and
// code, and <prefix>_request_duration_seconds, by method.
func requestMetrics(prefix, countHelp, durationHelp string) (*prometheus.CounterVec, *prometheus.HistogramVec) {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "_requests_total", Help: countHelp}, []string{"method", "code"}),
		prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    prefix + "_request_duration_seconds",
			Help:    durationHelp,
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"method"})
}

func (m *rpcMetrics) observe(method string, start time.Time, err error) {
	m.requests.WithLabelValues(method, status.Code(err).String()).Inc()
	m.duration.WithLabelValues(method).Observe(time.Since(start).Seconds())
}

func (m *rpcMetrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	m.observe(info.FullMethod, start, err)
	return resp, err
}

func (m *rpcMetrics) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	err := handler(srv, ss)
	m.observe(info.FullMethod, start, err)
	return err
}

// callLog logs one line per finished call, errors at the level their code
// deserves (go-grpc-middleware's server mapping: Internal is an ERROR,
// Unavailable a WARN, InvalidArgument an INFO) and successful calls at
// DEBUG. A router makes several calls per turn at hundreds of turns a
// second: a line for each successful one was most of what a call cost
// outside its handler, so unless DEBUG is on a successful call costs only
// the check. Health checks are not logged (container healthchecks poll them
// every few seconds). A stream that ends UNAVAILABLE once the server drains
// (a watch its service ends as it stops) is logged at INFO: the server's
// own shutdown is not a fault in its log, and a client still connected is
// told by the status itself. Unary calls keep their level: one failing
// during the drain may have met a real fault downstream.
type callLog struct {
	log      *slog.Logger
	draining <-chan struct{} // closed once the server stops accepting; nil for unary calls
}

// finished logs a call that ended; req is a unary call's request, or a
// stream's requestIDStream: one that names the request it is about (a
// turn's GetRequestId) has that id in the line, so that a failure is found
// with the turn's other lines, a notice's included, whose caller logs
// nothing.
func (l callLog) finished(ctx context.Context, method, kind string, start time.Time, err error, req any) {
	code := status.Code(err)
	level := slog.LevelDebug
	if code != codes.OK {
		level = slog.Level(logging.DefaultServerCodeToLevel(code))
	}
	if code == codes.Unavailable && isClosed(l.draining) {
		level = slog.LevelInfo
	}
	if !l.log.Enabled(ctx, level) || strings.HasPrefix(method, healthMethods) {
		return
	}
	attrs := append(callFields(ctx, method),
		slog.String("grpc.method_type", kind),
		slog.String("grpc.code", code.String()),
		slog.Float64("grpc.time_ms", float64(time.Since(start).Microseconds())/1000))
	if r, ok := req.(interface{ GetRequestId() string }); ok && r.GetRequestId() != "" {
		attrs = append(attrs, slog.String("request_id", r.GetRequestId()))
	}
	if err != nil {
		attrs = append(attrs, slog.String("grpc.error", err.Error()))
	}
	l.log.LogAttrs(ctx, level, "finished call", attrs...)
}

// healthMethods is the prefix of every grpc.health.v1 method.
var healthMethods = "/" + healthpb.Health_ServiceDesc.ServiceName + "/"

// callFields name a call in its log lines: service, method, peer and trace.
func callFields(ctx context.Context, fullMethod string) []slog.Attr {
	service, method := "", strings.TrimPrefix(fullMethod, "/")
	if i := strings.LastIndexByte(method, '/'); i >= 0 {
		service, method = method[:i], method[i+1:]
	}
	attrs := make([]slog.Attr, 0, 9)
	attrs = append(attrs, slog.String("grpc.component", "server"),
		slog.String("grpc.service", service), slog.String("grpc.method", method))
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		attrs = append(attrs, slog.String("peer.address", p.Addr.String()))
	}
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
	}
	return attrs
}

// isClosed reports whether ch is closed (false for nil).
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func logUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	l := callLog{log: log}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		l.finished(ctx, info.FullMethod, "unary", start, err, req)
		return resp, err
	}
}

func logStream(log *slog.Logger, draining <-chan struct{}) grpc.StreamServerInterceptor {
	l := callLog{log, draining}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		rs := &requestIDStream{ServerStream: ss}
		err := handler(srv, rs)
		kind := "server_stream"
		switch {
		case info.IsClientStream && info.IsServerStream:
			kind = "bidi_stream"
		case info.IsClientStream:
			kind = "client_stream"
		}
		l.finished(ss.Context(), info.FullMethod, kind, start, err, rs)
		return err
	}
}

// requestIDStream remembers the request id of the first message a stream
// received that names one (a Generate's), for the stream's log line.
type requestIDStream struct {
	grpc.ServerStream
	id string
}

func (s *requestIDStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if r, ok := m.(interface{ GetRequestId() string }); ok && err == nil && s.id == "" {
		s.id = r.GetRequestId()
	}
	return err
}

// GetRequestId is the id the stream's messages named ("": none).
func (s *requestIDStream) GetRequestId() string { return s.id }

// panicToInternal logs a handler panic with its stack (once) and answers the client
// codes.Internal without the panic value: the client learns nothing about our insides.
func panicToInternal(log *slog.Logger) recovery.Option {
	return recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		method, _ := grpc.Method(ctx)
		attrs := append(callFields(ctx, method), slog.String("panic", fmt.Sprint(p)), slog.String("stack", string(debug.Stack())))
		log.LogAttrs(ctx, slog.LevelError, "panic in gRPC handler", attrs...)
		return status.Error(codes.Internal, "internal error")
	})
}

func recoverUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return recovery.UnaryServerInterceptor(panicToInternal(log))
}

func recoverStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return recovery.StreamServerInterceptor(panicToInternal(log))
}

// httpHandler wraps the HTTP mux; see the order above.
func (s *Server) httpHandler(m *rpcMetrics) http.Handler {
	h := recoverHTTP(s.log, s.httpMux)
	h = m.countAborts(h)
	h = promhttp.InstrumentHandlerDuration(m.httpDur.MustCurryWith(nil), h)
	h = promhttp.InstrumentHandlerCounter(m.httpReqs, h)
	h = traceHTTP(tracing, h, otelhttp.NewHandler(h, s.opts.Name,
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			return r.Method + " " + r.URL.Path
		}),
		// Scrapes and probes would drown the traces.
		otelhttp.WithFilter(func(r *http.Request) bool {
			return r.URL.Path != "/metrics" && r.URL.Path != "/healthz"
		}),
	))
	return s.httpCalls.handler(h)
}

// untracedProvider is the global tracer provider the process starts with,
// whose spans nobody records until another is installed.
var untracedProvider = otel.GetTracerProvider()

// tracing reports whether a tracer provider has been installed.
func tracing() bool { return otel.GetTracerProvider() != untracedProvider }

// traceHTTP serves a request through traced (otelhttp) while on says spans
// may be recorded, and through next with only the caller's trace context
// otherwise: building a span and its attributes for every request is wasted
// when nothing records the span (BenchmarkTraceHTTP: 3.1–3.8 µs and 38
// allocations a request through otelhttp, 0.5 µs and 6 without).
func traceHTTP(on func() bool, next, traced http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if on() {
			traced.ServeHTTP(w, r)
			return
		}
		if r.Header.Get("Traceparent") != "" || r.Header.Get("Baggage") != "" {
			r = r.WithContext(otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
		}
		next.ServeHTTP(w, r)
	})
}

// countAborts counts a request its handler aborted (http.ErrAbortHandler:
// the client went away, with nobody left to answer) as a 499, which the
// metrics and otelhttp outside it, recording only once the handler
// returns, would miss; the abort then goes on to net/http.
func (m *rpcMetrics) countAborts(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					method := httpMethodLabel(r.Method)
					m.httpReqs.WithLabelValues(method, "499").Inc()
					m.httpDur.WithLabelValues(method).Observe(time.Since(start).Seconds())
					trace.SpanFromContext(r.Context()).SetAttributes(attribute.Int("http.response.status_code", 499))
				}
				panic(p)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// httpMethodLabel is a request method as promhttp labels it: the common
// methods, spelt in upper or lower case, in lower case; any other "unknown"
// (so that a client cannot make series of its own).
func httpMethodLabel(method string) string {
	m := strings.ToLower(method)
	if method != m && method != strings.ToUpper(method) {
		return "unknown"
	}
	switch m {
	case "get", "put", "head", "post", "delete", "connect", "options", "notify", "trace", "patch":
		return m
	}
	return "unknown"
}

// recoverHTTP turns a handler panic into a 500 (when nothing was written yet) and one
// log line with the stack, instead of net/http's dropped connection.
func recoverHTTP(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if p == http.ErrAbortHandler {
				panic(p) // the documented way to abort a response; net/http handles it
			}
			log.ErrorContext(r.Context(), "panic in HTTP handler",
				"http.method", r.Method, "http.path", r.URL.Path,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			http.Error(w, "internal error", http.StatusInternalServerError)
		}()
		next.ServeHTTP(w, r)
	})
}
