package frontend

import (
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestTransportDetailNotShown: gRPC's own account of a failed connection,
// which names the mesh's internal addresses, is not what a client reads;
// a backend's own message is.
func TestTransportDetailNotShown(t *testing.T) {
	dial := status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 10.0.0.7:9100: connect: connection refused"`)
	if ae := toAPIError(dial); ae.Status != http.StatusServiceUnavailable || strings.Contains(ae.Message, "10.0.0.7") {
		t.Fatalf("a dial failure answered %d %q", ae.Status, ae.Message)
	}
	for _, msg := range []string{`engine unreachable: Post "http://10.0.0.7:8000/v1/completions": EOF`,
		"engine stream: read tcp 10.0.0.3:4123->10.0.0.7:8000: connection reset by peer"} {
		if ae := toAPIError(status.Error(codes.Unavailable, msg)); strings.Contains(ae.Message, "10.0.0.7") {
			t.Fatalf("a shim's engine failure answered %q", ae.Message)
		}
	}
	refusal := "1 validation error: see https://errors.pydantic.dev/2.11/v/int_parsing"
	if ae := toAPIError(status.Error(codes.InvalidArgument, refusal)); ae.Message != refusal {
		t.Fatalf("an engine's refusal citing a URL answered %q", ae.Message)
	}
	engine := status.Error(codes.Unavailable, "SGLang: the server is overloaded")
	if ae := toAPIError(engine); ae.Message != "SGLang: the server is overloaded" {
		t.Fatalf("an engine's own message answered %q", ae.Message)
	}
}
