package servicekit

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
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
