package servicekit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver/dns"
)

// HealthcheckTimeout bounds one Healthcheck call.
const HealthcheckTimeout = 2 * time.Second

// Reconnecting and liveness of every client connection in the mesh.
//
// gRPC's default reconnect backoff starts at 1 s and grows to 2 minutes, so a
// peer that restarts a few seconds after it died is only tried again seconds
// after it is back (a killed shim answered 503s for 5–9 s this way). Mesh peers
// are few and near: retry from 100 ms, never waiting more than a second, so a
// restarted peer is used within a second of listening.
var reconnect = grpc.ConnectParams{
	Backoff: backoff.Config{
		BaseDelay:  100 * time.Millisecond,
		Multiplier: 1.6,
		Jitter:     0.2,
		MaxDelay:   time.Second,
	},
	MinConnectTimeout: 2 * time.Second,
}

// A peer is named by DNS (a Kubernetes headless Service's pod names, a
// compose service's name) and a replaced pod comes back at a new address.
// gRPC looks a name up again when its connection fails, but by default at
// most once every 30 s, and the first lookup after a pod stops can still
// return its old address (a headless Service publishes pods that are not
// ready): the replacement would then be unreachable for half a minute.
// Once a second follows a moved peer within about a second of its new
// address being published, as reconnect does for a restarted one.
func init() { dns.SetMinResolutionInterval(time.Second) }

// clientKeepalive pings a peer that has sent nothing for 10 s (gRPC's floor)
// while a call is open, and drops the connection when the ping is not answered
// within 3 s: a stream to a hung process (stopped, or its host gone without a
// reset) fails in about 13 s instead of never. Servers permit these pings
// (serverKeepalive).
var clientKeepalive = keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 3 * time.Second}

// serverKeepalive lets clients ping as often as clientKeepalive does (gRPC's
// default policy closes connections that ping more than every 5 minutes).
var serverKeepalive = keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}

// Dial returns a client connection to a Switchyard service: insecure (the mesh runs on
// a trusted network), with the trace stats handler so the caller's trace context
// travels as W3C traceparent (traceGRPC), the mesh's reconnect backoff and keepalive. It does not
// connect until the first call. opts are appended after servicekit's own.
func Dial(target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	base := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(newClientTraceGRPC()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize), grpc.MaxCallSendMsgSize(maxMsgSize)),
		grpc.WithConnectParams(reconnect),
		grpc.WithKeepaliveParams(clientKeepalive),
		// No service config from DNS (a TXT lookup beside every A and
		// AAAA one, which the once-a-second re-resolution above would
		// repeat while a peer is down): the mesh sets none there.
		grpc.WithDisableServiceConfig(),
		experimental.WithBufferPool(wirePool), // codec.go
	}
	base = append(base, transportDialOptions()...)
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
	if err := CheckHealth(ctx, conn); err != nil {
		return fmt.Errorf("healthcheck %s: %w", addr, err)
	}
	return nil
}

// ErrNotServing: a peer answered its health check with another status than
// SERVING (starting, draining).
var ErrNotServing = errors.New("not serving")

// CheckHealth asks the grpc.health.v1 service on conn for the whole
// server's status: nil only if it is SERVING, ErrNotServing (wrapped, with
// the status) for another answer, the call's error if it failed.
func CheckHealth(ctx context.Context, conn grpc.ClientConnInterface) error {
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("%w: %s", ErrNotServing, st)
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
