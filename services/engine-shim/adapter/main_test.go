package adapter

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// zmq4 v0.17.0 never stops a PUB socket's writer goroutine
		// (socket.Close does not close its pubMWriter). Only the protocol
		// fake has PUB sockets; the adapter's own (SUB, DEALER) stop.
		goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"),
	)
}
