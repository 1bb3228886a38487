package servicekit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// With tracing off a request skips otelhttp and still carries the caller's
// trace context (W3C traceparent) to its handler; with tracing on it goes
// through otelhttp.
func TestTraceHTTPKeepsTheCallersTraceEitherWay(t *testing.T) {
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	for _, on := range []bool{false, true} {
		var seen trace.TraceID
		viaOtel := false
		next := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			seen = trace.SpanContextFromContext(r.Context()).TraceID()
		})
		traced := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			viaOtel = true
			next.ServeHTTP(w, r.WithContext(propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))))
		})
		h := traceHTTP(func() bool { return on }, next, traced)
		req := httptest.NewRequest(http.MethodGet, "/v1/x", nil)
		req.Header.Set("Traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
		h.ServeHTTP(httptest.NewRecorder(), req)
		if viaOtel != on {
			t.Errorf("tracing %v: went through otelhttp = %v", on, viaOtel)
		}
		if seen.String() != traceID {
			t.Errorf("tracing %v: the handler saw trace %s, want the caller's %s", on, seen, traceID)
		}

		seen = trace.TraceID{}
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/v1/x", nil))
		if seen.IsValid() {
			t.Errorf("tracing %v: a request without traceparent carried trace %s", on, seen)
		}
	}
}

// Installing a tracer provider turns tracing on.
func TestTracingOnceAProviderIsInstalled(t *testing.T) {
	prev := otel.GetTracerProvider()
	t.Cleanup(func() {
		if prev != untracedProvider { // the process's first provider cannot be installed again
			otel.SetTracerProvider(prev)
		}
	})
	otel.SetTracerProvider(tracenoop.NewTracerProvider())
	if !tracing() {
		t.Error("tracing() = false with a tracer provider installed")
	}
}

// Once a tracer provider is installed, a call over a call stream runs in a
// server span of its own, a child of the caller's, which records a failed
// call's status.
func TestCallStreamSpansWhenTraced(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	t.Cleanup(func() {
		if prev != untracedProvider { // the process's first provider cannot be installed again
			otel.SetTracerProvider(prev)
		}
		_ = tp.Shutdown(context.Background())
	})
	otel.SetTracerProvider(tp)

	r := start(t, Options{})
	ctx, caller := callerTrace(t)
	calls := NewCallConn(r.conn)
	streamOpen(t, calls)
	if _, err := invoke(ctx, calls, echoMethod, "traced"); err != nil {
		t.Fatal(err)
	}
	if _, err := invoke(ctx, calls, echoMethod, "fail"); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Echo(fail) = %v, want FAILED_PRECONDITION", err)
	}
	var served []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == echoMethod[1:] && s.SpanKind() == trace.SpanKindServer {
			served = append(served, s)
		}
	}
	if len(served) != 2 {
		t.Fatalf("recorded %d server spans named %s, want one per call (2)", len(served), echoMethod[1:])
	}
	for _, s := range served {
		if s.Parent().SpanID() != caller.SpanID() || s.SpanContext().TraceID() != caller.TraceID() {
			t.Errorf("span %s: parent %s in trace %s, want the caller's %s in %s",
				s.SpanContext().SpanID(), s.Parent().SpanID(), s.SpanContext().TraceID(), caller.SpanID(), caller.TraceID())
		}
	}
	if got := served[0].Status().Code; got != otelcodes.Unset {
		t.Errorf("the answered call's span has status %v, want unset", got)
	}
	if got := served[1].Status().Code; got != otelcodes.Error {
		t.Errorf("the failed call's span has status %v, want error", got)
	}
	if got := r.svc.lastSpan(); got.SpanID() != served[1].SpanContext().SpanID() {
		t.Errorf("the handler saw span %s, want the call's own %s", got.SpanID(), served[1].SpanContext().SpanID())
	}
}

// BenchmarkTraceHTTP is what a request pays for tracing before its handler
// runs, with spans recorded nowhere (otelhttp's span and attributes, or
// only the caller's trace context):
//
//	go test ./services/servicekit -run '^$' -bench TraceHTTP -count 6
func BenchmarkTraceHTTP(b *testing.B) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	for _, on := range []bool{true, false} {
		name := map[bool]string{true: "otelhttp", false: "context-only"}[on]
		b.Run(name, func(b *testing.B) {
			h := traceHTTP(func() bool { return on }, next, otelhttp.NewHandler(next, "bench"))
			req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			req.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, req)
			}
		})
	}
}
