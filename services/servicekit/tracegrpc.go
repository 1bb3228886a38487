package servicekit

import (
	"context"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
)

// traceGRPC is a connection's stats handler: otelgrpc's while on says spans
// may be recorded, and otherwise one that only carries the caller's trace
// context (W3C traceparent and baggage) across the call, as traceHTTP does
// for HTTP. otelgrpc builds a span, its attributes and a metric record for
// every call and looks at every message, which is wasted when nothing
// records them: 2 % of a warm 2k agent turn's CPU in BenchmarkHotPath's
// profile, most of it the frontend's (its Generate stream is a new call
// every turn); BenchmarkTraceGRPC: 2.8–3.3 µs and 38 allocations for a
// unary call's two sides against 0.7 µs and 10, the benchmark's own stats
// values included (docs/benchmarks.md). Whether a call is traced is decided
// once, when it starts.
type traceGRPC struct {
	on     func() bool
	traced stats.Handler // otelgrpc's
	client bool          // the caller's side: inject; else extract
}

func newClientTraceGRPC() stats.Handler {
	return traceGRPC{on: tracing, traced: otelgrpc.NewClientHandler(), client: true}
}

func newServerTraceGRPC() stats.Handler {
	return traceGRPC{on: tracing, traced: otelgrpc.NewServerHandler()}
}

// tracedCall marks, in a call's context, that this side's otelgrpc handler
// (the value) tagged it: a server call's context passed on to an outgoing
// call must not make the client side's handler see a call it never tagged.
type tracedCall struct{}

func (h traceGRPC) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if h.on() {
		return context.WithValue(h.traced.TagRPC(ctx, info), tracedCall{}, h.traced)
	}
	if h.client {
		return injectTrace(ctx)
	}
	return extractTrace(ctx)
}

func (h traceGRPC) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if ctx.Value(tracedCall{}) == h.traced {
		h.traced.HandleRPC(ctx, s)
	}
}

// TagConn and HandleConn: otelgrpc does nothing per connection either.
func (traceGRPC) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (traceGRPC) HandleConn(context.Context, stats.ConnStats)                       {}

// injectTrace adds ctx's trace context to the call's outgoing metadata, when
// it has one.
func injectTrace(ctx context.Context) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() && baggage.FromContext(ctx).Len() == 0 {
		return ctx
	}
	md, ok := metadata.FromOutgoingContext(ctx) // a copy: ours to change
	if !ok {
		md = metadata.MD{}
	}
	otel.GetTextMapPropagator().Inject(ctx, metadataCarrier(md))
	return metadata.NewOutgoingContext(ctx, md)
}

// extractTrace takes the caller's trace context from the call's incoming
// metadata, when it sent one.
func extractTrace(ctx context.Context) context.Context {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok || len(md.Get("traceparent")) == 0 && len(md.Get("baggage")) == 0 {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, metadataCarrier(md))
}

// metadataCarrier is gRPC metadata as a propagation.TextMapCarrier.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
