// Package servicetest is the test kit of Switchyard's services: what their tests
// share instead of copying it.
//
//   - Waiting: Eventually polls a condition and Within waits for an event, both
//     with a deadline (Patience) that only turns a hang into a failure; they
//     measure nothing. Poll is the loop itself, for a caller that words its own
//     failure. A check that something did NOT happen waits for a later event
//     that would have followed it, never for a sleep.
//   - gRPC peers: Serve and ServeAt run a plain grpc.Server on a loopback port
//     (for services that dial peers by address); Bufnet serves in memory over
//     bufconn and dials with grpc.NewClient("passthrough:///…") (for code that
//     takes a dial function or a connection).
//   - Services: Start runs a service in its servicekit.Server on loopback, as
//     its main does, with a client connection to it; Get reads its REST gateway
//     or /metrics; VerifyNoLeaks is goleak with the pooled connections that
//     grpc-go and net/http wind down on their own.
//   - Fakes: FakeScheduler (the worker watch) and FakeShim (a worker's KV event
//     side), the peers the indexers and followers are tested against.
//
// It is imported only by _test.go files. servicekit's own tests cannot import it
// (it is built on servicekit) and keep their own helpers.
package servicetest
