package servicekit

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// HealthcheckTimeout bounds one Healthcheck call.
const HealthcheckTimeout = 2 * time.Second

// Dial returns a client connection to a Switchyard service: insecure (the mesh runs on
// a trusted network), with the otelgrpc stats handler so the caller's trace context
// travels as W3C traceparent. It does not connect until the first call. opts are
// appended after servicekit's own.
func Dial(target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	base := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize), grpc.MaxCallSendMsgSize(maxMsgSize)),
	}
	conn, err := grpc.NewClient(target, append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("servicekit: dial %q: %w", target, err)
	}
	return conn, nil
}

// Healthcheck asks the grpc.health.v1 service at addr for the whole server's status
// within HealthcheckTimeout and returns nil only if it is SERVING. A wildcard host
// (":9100") means this host.
func Healthcheck(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), HealthcheckTimeout)
	defer cancel()
	conn, err := grpc.NewClient(localTarget(addr), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("healthcheck %s: %w", addr, err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return fmt.Errorf("healthcheck %s: %w", addr, err)
	}
	if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("healthcheck %s: %s", addr, st)
	}
	return nil
}

// localTarget makes ":9100" and "0.0.0.0:9100" dialable as 127.0.0.1:9100.
func localTarget(addr string) string {
	switch {
	case len(addr) > 0 && addr[0] == ':':
		return "127.0.0.1" + addr
	case len(addr) > 8 && addr[:8] == "0.0.0.0:":
		return "127.0.0.1" + addr[7:]
	case len(addr) > 5 && addr[:5] == "[::]:":
		return "127.0.0.1" + addr[4:]
	}
	return addr
}
