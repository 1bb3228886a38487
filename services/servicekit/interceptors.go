package servicekit

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// The order of everything a gRPC call passes through, outermost first, written down
// here once:
//
//  1. otelgrpc stats handler (grpc.StatsHandler, always outside the interceptors):
//     extracts the caller's W3C trace context and opens the server span, so every log
//     line and metric below happens inside the span.
//  2. in-flight count: outermost of the interceptors, so that it covers the whole
//     handler; it is what shutdown's drain reports and, after a cut, waits on.
//  3. metrics: counts every call with the status code the client finally sees.
//  4. logging: one line per finished call (method, code, duration, trace id); an error
//     is logged here once, at the boundary, and nowhere else. Health checks are not
//     logged (container healthchecks poll them every few seconds).
//  5. recovery: innermost, so a panic in a handler becomes codes.Internal before
//     logging and metrics see the call; its stack is logged once, here.
//
// HTTP (gateway and HandleHTTP routes) goes: in-flight count → otelhttp (W3C
// traceparent) → metrics → panic recovery (a panic becomes a counted, traced 500) →
// mux; gateway routes then re-enter at (1) through the loopback connection.

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

// grpcLogger adapts slog to the go-grpc-middleware logging interface.
func grpcLogger(log *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		log.Log(ctx, slog.Level(lvl), msg, fields...)
	})
}

func loggingOptions() []logging.Option {
	return []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithFieldsFromContext(func(ctx context.Context) logging.Fields {
			if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
				return logging.Fields{"trace_id", sc.TraceID().String()}
			}
			return nil
		}),
	}
}

// notHealth selects every call except grpc.health.v1 ones.
var notHealth = selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool {
	return c.Service != healthpb.Health_ServiceDesc.ServiceName
})

func logUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return selector.UnaryServerInterceptor(logging.UnaryServerInterceptor(grpcLogger(log), loggingOptions()...), notHealth)
}

func logStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return selector.StreamServerInterceptor(logging.StreamServerInterceptor(grpcLogger(log), loggingOptions()...), notHealth)
}

// panicToInternal logs a handler panic with its stack (once) and answers the client
// codes.Internal without the panic value: the client learns nothing about our insides.
func panicToInternal(log *slog.Logger) recovery.Option {
	return recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		// The logging interceptor put method and peer fields in ctx.
		fields := append(logging.ExtractFields(ctx), "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		log.ErrorContext(ctx, "panic in gRPC handler", fields...)
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
	h = promhttp.InstrumentHandlerDuration(m.httpDur.MustCurryWith(nil), h)
	h = promhttp.InstrumentHandlerCounter(m.httpReqs, h)
	h = otelhttp.NewHandler(h, s.opts.Name,
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			return r.Method + " " + r.URL.Path
		}),
		// Scrapes and probes would drown the traces.
		otelhttp.WithFilter(func(r *http.Request) bool {
			return r.URL.Path != "/metrics" && r.URL.Path != "/healthz"
		}),
	)
	return s.httpCalls.handler(h)
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
