package servicekit

import "google.golang.org/grpc"

// How much every mesh connection moves per system call and per round trip.
//
// A warm 100k-token agent turn sends a 400 KB GenerateRequest to its shim and
// 50 KB hash lists to the scheduler and the indexers. With gRPC's defaults
// (32 KB read and write buffers, a 64 KB initial HTTP/2 window grown by its
// bandwidth estimator, which on loopback barely grows) such a message leaves
// in a dozen write calls and waits on window updates between them: the hot-path
// benchmark counted about 64 writes and 74 reads per turn across the mesh.
// Buffers as large as a typical big message and windows that never stop one
// mid-flight send it in one or two calls. The windows are credit, not memory:
// a receiver buffers only what its application has not read yet, and the
// buffers are per connection, of which a mesh has a few per peer.
const (
	wireBuffer   = 512 << 10
	streamWindow = 8 << 20
	connWindow   = 16 << 20
)

func transportServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.WriteBufferSize(wireBuffer),
		grpc.ReadBufferSize(wireBuffer),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
	}
}

func transportDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithWriteBufferSize(wireBuffer),
		grpc.WithReadBufferSize(wireBuffer),
		grpc.WithInitialWindowSize(streamWindow),
		grpc.WithInitialConnWindowSize(connWindow),
	}
}
