package servicekit

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

func TestSetupTelemetryChoosesExporter(t *testing.T) {
	prev := tracenoop.NewTracerProvider()
	t.Cleanup(func() {
		otel.SetTracerProvider(prev)
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	})
	for _, tc := range []struct {
		name    string
		env     map[string]string
		wantErr bool
		wantSDK bool // an SDK tracer provider was installed
	}{
		{name: "off by default"},
		{name: "none", env: map[string]string{"OTEL_TRACES_EXPORTER": "none"}},
		{name: "console", env: map[string]string{"OTEL_TRACES_EXPORTER": "console"}, wantSDK: true},
		// Exporters connect lazily, so an unreachable endpoint is not an error here.
		{name: "endpoint implies otlp", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, wantSDK: true},
		{name: "otlp grpc", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, wantSDK: true},
		{name: "unknown exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin2000"}, wantErr: true},
		{name: "unknown protocol", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
				t.Setenv(k, "")
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			otel.SetTracerProvider(prev)
			shutdown, err := SetupTelemetry(context.Background(), "test")
			if (err != nil) != tc.wantErr {
				t.Fatalf("SetupTelemetry: %v, want error %v", err, tc.wantErr)
			}
			installed := otel.GetTracerProvider() != prev
			if installed != tc.wantSDK {
				t.Errorf("tracer provider installed = %v, want %v", installed, tc.wantSDK)
			}
			if fields := otel.GetTextMapPropagator().Fields(); len(fields) == 0 {
				t.Error("no propagator installed")
			}
			if err := shutdown(context.Background()); err != nil && !tc.wantSDK {
				t.Errorf("shutdown: %v", err)
			}
		})
	}
}
