package servicekit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
)

// w3cPropagation installs the propagator SetupTelemetry installs, for the
// test's length.
func w3cPropagation(t testing.TB) {
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })
}

// recordingHandler stands in for otelgrpc: it counts what reaches it.
type recordingHandler struct{ tagged, handled int }

func (r *recordingHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	r.tagged++
	return ctx
}
func (r *recordingHandler) HandleRPC(context.Context, stats.RPCStats) { r.handled++ }
func (r *recordingHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (r *recordingHandler) HandleConn(context.Context, stats.ConnStats) {}

// callerSpan is a context holding a remote caller's sampled span.
func callerSpan(t testing.TB) (context.Context, trace.TraceID) {
	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	return trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled, Remote: true,
	})), traceID
}

// Untraced, a call skips otelgrpc and still carries the caller's trace
// context from the client's side to the server's.
func TestTraceGRPCCarriesTheCallersTraceUntraced(t *testing.T) {
	w3cPropagation(t)
	var clientOtel, serverOtel recordingHandler
	off := func() bool { return false }
	client := traceGRPC{on: off, traced: &clientOtel, client: true}
	server := traceGRPC{on: off, traced: &serverOtel}
	info := &stats.RPCTagInfo{FullMethodName: "/switchyard.test.Echo/Echo"}

	ctx, traceID := callerSpan(t)
	// A call that already carries metadata keeps it.
	cctx := client.TagRPC(metadata.AppendToOutgoingContext(ctx, "x-request-id", "r1"), info)
	out, _ := metadata.FromOutgoingContext(cctx)
	if len(out.Get("traceparent")) != 1 || len(out.Get("x-request-id")) != 1 {
		t.Fatalf("outgoing metadata %v, want a traceparent and the call's x-request-id", out)
	}
	in := server.TagRPC(metadata.NewIncomingContext(context.Background(), out), info)
	if got := trace.SpanContextFromContext(in).TraceID(); got != traceID {
		t.Errorf("the server's side has trace %s, want the caller's %s", got, traceID)
	}
	client.HandleRPC(cctx, &stats.End{})
	server.HandleRPC(in, &stats.End{})
	if clientOtel != (recordingHandler{}) || serverOtel != (recordingHandler{}) {
		t.Errorf("otelgrpc was called: client %+v, server %+v", clientOtel, serverOtel)
	}

	// Baggage alone travels too.
	member, _ := baggage.NewMember("tenant", "acme")
	bag, _ := baggage.New(member)
	out, _ = metadata.FromOutgoingContext(client.TagRPC(baggage.ContextWithBaggage(context.Background(), bag), info))
	in = server.TagRPC(metadata.NewIncomingContext(context.Background(), out), info)
	if got := baggage.FromContext(in).Member("tenant").Value(); got != "acme" {
		t.Errorf("the server's side has baggage tenant=%q, want acme (outgoing metadata %v)", got, out)
	}

	// No trace context, nothing added or found.
	if md, ok := metadata.FromOutgoingContext(client.TagRPC(context.Background(), info)); ok {
		t.Errorf("a call without a trace got metadata %v", md)
	}
	plain := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-request-id", "r1"))
	if sc := trace.SpanContextFromContext(server.TagRPC(plain, info)); sc.IsValid() {
		t.Errorf("a call without traceparent carried trace %s", sc.TraceID())
	}
}

// Traced, a call goes through otelgrpc from start to end, and a call that
// started untraced stays so when tracing is turned on meanwhile.
func TestTraceGRPCUsesOtelgrpcWhenTraced(t *testing.T) {
	on := true
	var traced recordingHandler
	h := traceGRPC{on: func() bool { return on }, traced: &traced}
	info := &stats.RPCTagInfo{FullMethodName: "/switchyard.test.Echo/Echo"}

	ctx := h.TagRPC(context.Background(), info)
	h.HandleRPC(ctx, &stats.Begin{})
	h.HandleRPC(ctx, &stats.End{})
	if traced.tagged != 1 || traced.handled != 2 {
		t.Errorf("traced call: otelgrpc tagged %d, handled %d; want 1 and 2", traced.tagged, traced.handled)
	}

	// The server call's context passed on to an outgoing call: the client
	// side's handler did not tag that call.
	var clientOtel recordingHandler
	client := traceGRPC{on: func() bool { return false }, traced: &clientOtel, client: true}
	client.HandleRPC(client.TagRPC(ctx, info), &stats.End{})
	if clientOtel.handled != 0 {
		t.Errorf("the client side's otelgrpc saw a call it never tagged")
	}

	on = false
	untraced := h.TagRPC(context.Background(), info)
	on = true
	h.HandleRPC(untraced, &stats.End{})
	if traced.tagged != 1 || traced.handled != 2 {
		t.Errorf("a call started untraced reached otelgrpc: tagged %d, handled %d", traced.tagged, traced.handled)
	}
}

// BenchmarkTraceGRPC is the stats handlers' work for one unary call, both
// sides, with the caller's trace context and without (the mesh's calls
// when nothing traces): otelgrpc's (what every call paid before) against
// traceGRPC's untraced path.
//
//	go test ./services/servicekit -run '^$' -bench TraceGRPC -count 3
func BenchmarkTraceGRPC(b *testing.B) {
	w3cPropagation(b)
	off := func() bool { return false }
	for _, c := range []struct {
		name           string
		client, server stats.Handler
	}{
		{"otelgrpc", otelgrpc.NewClientHandler(), otelgrpc.NewServerHandler()},
		{"untraced", traceGRPC{on: off, traced: otelgrpc.NewClientHandler(), client: true}, traceGRPC{on: off, traced: otelgrpc.NewServerHandler()}},
	} {
		for _, withTrace := range []bool{true, false} {
			b.Run(fmt.Sprintf("%s/caller-trace=%v", c.name, withTrace), func(b *testing.B) {
				caller := context.Background()
				if withTrace {
					caller, _ = callerSpan(b)
				}
				info := &stats.RPCTagInfo{FullMethodName: "/switchyard.scheduler.v1.SchedulerService/Route"}
				now := time.Now()
				b.ReportAllocs()
				for b.Loop() {
					cctx := c.client.TagRPC(caller, info)
					c.client.HandleRPC(cctx, &stats.Begin{Client: true, BeginTime: now})
					c.client.HandleRPC(cctx, &stats.OutPayload{Client: true, Length: 512, WireLength: 517})
					out, _ := metadata.FromOutgoingContext(cctx)
					sctx := c.server.TagRPC(metadata.NewIncomingContext(context.Background(), out), info)
					c.server.HandleRPC(sctx, &stats.Begin{BeginTime: now})
					c.server.HandleRPC(sctx, &stats.InPayload{Length: 512, WireLength: 517})
					c.server.HandleRPC(sctx, &stats.OutPayload{Length: 64, WireLength: 69})
					c.server.HandleRPC(sctx, &stats.End{BeginTime: now, EndTime: now})
					c.client.HandleRPC(cctx, &stats.InPayload{Client: true, Length: 64, WireLength: 69})
					c.client.HandleRPC(cctx, &stats.End{Client: true, BeginTime: now, EndTime: now})
				}
			})
		}
	}
}
