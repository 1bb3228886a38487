package servicekit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// SetupTelemetry installs the process-wide OpenTelemetry tracer provider and the W3C
// TraceContext + Baggage propagator, configured by the standard variables:
//
//   - OTEL_TRACES_EXPORTER: comma-separated "otlp", "console" (stdout) or "none". Unset
//     means "otlp" if OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
//     is set, else "none": tracing is off by default.
//   - OTEL_EXPORTER_OTLP_TRACES_PROTOCOL / OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" or
//     "http/protobuf" (the default, as the specification says); the endpoint, headers
//     and timeout variables are read by the exporters themselves.
//   - OTEL_SERVICE_NAME (else service) and OTEL_RESOURCE_ATTRIBUTES for the resource;
//     OTEL_TRACES_SAMPLER(_ARG) for sampling.
//
// The propagator is installed even with tracing off, so a client's traceparent still
// flows through every hop. Call it once per process (`switchyard up` calls it once for
// all services) and call shutdown before exit to flush spans.
func SetupTelemetry(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	noop := func(context.Context) error { return nil }

	names := os.Getenv("OTEL_TRACES_EXPORTER")
	if names == "" {
		names = "none"
		if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
			names = "otlp"
		}
	}
	var exporters []sdktrace.SpanExporter
	closeAll := func() {
		for _, e := range exporters {
			_ = e.Shutdown(ctx)
		}
	}
	for _, name := range strings.Split(names, ",") {
		name = strings.TrimSpace(name)
		var exp sdktrace.SpanExporter
		switch name {
		case "none", "":
			continue
		case "console":
			exp, err = stdouttrace.New()
		case "otlp":
			exp, err = otlpExporter(ctx)
		default:
			err = fmt.Errorf("unknown OTEL_TRACES_EXPORTER %q (want otlp, console or none)", name)
		}
		if err != nil {
			closeAll()
			return noop, fmt.Errorf("servicekit: telemetry: %w", err)
		}
		exporters = append(exporters, exp)
	}
	if len(exporters) == 0 {
		return noop, nil
	}

	// Later options win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the
	// name passed in.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil && res == nil {
		closeAll()
		return noop, fmt.Errorf("servicekit: telemetry resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	for _, e := range exporters {
		opts = append(opts, sdktrace.WithBatcher(e))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	otel.SetTracerProvider(tp)
	return func(ctx context.Context) error {
		return errors.Join(tp.Shutdown(ctx))
	}, nil
}

func otlpExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch proto {
	case "grpc":
		return otlptracegrpc.New(ctx)
	case "http/protobuf", "":
		return otlptracehttp.New(ctx)
	default:
		return nil, fmt.Errorf("unsupported OTLP protocol %q (want grpc or http/protobuf)", proto)
	}
}
