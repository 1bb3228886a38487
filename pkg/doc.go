// Package pkg is the root of Switchyard's cores: the plain Go packages that
// hold the logic of every service (admission, routing, flashindex,
// sessionindex, hints, enginesim, trace, replay, ...). The services and the
// CLI are thin shells around them; the offline simulator runs the very same
// cores on virtual time. This file is the contract they share, and
// contract_test.go checks its first part.
//
// # What a core never does
//
// A non-test file under pkg/ never imports os, net or net/http, never reads
// or waits on the wall clock (time.Now, Since, Until, Sleep, After, Tick and
// the timers) and never starts a goroutine. Shells open files and sockets
// and hand a core what it decodes or writes: an io.Reader, an io.Writer,
// bytes, or a small func for an effect it decides on (trace.Opener, which
// the file sink calls when it rolls to a new file). Decoding stays in the
// core (trace.Read, trace.ReadRecords, enginesim.ParseTableModel); listing,
// opening and writing files, and the goroutine that drains the trace queue,
// live in the shells (services/servicekit/tracefile, used by the frontend
// and by cmd/switchyard). A core may hand a shell a channel to wait on
// (admission.Waiter.Ready) or watch one it is given for cancellation
// (replay.Config.Done), but it never blocks a goroutine of its own.
//
// The allow-list in contract_test.go names the only exceptions: two
// developer commands (package main, run with go run) beside the tokenizer
// whose data they make.
//
// # Clock
//
// Time is an argument. A function or method that needs the current time
// takes now time.Time from its caller (admission, routing, registry,
// sessionindex, hints, turns, flashindex's predictions, trace's Sink.Write
// and NewFileSink's start);
// the service passes the wall clock, replay its virtual clock, a test
// whatever it likes. What a core computes about time it returns as a value
// (enginesim's Step returns the simulated duration of the step) rather than
// waiting for it.
//
// flashindex follows it too: Predict takes the now a prediction's TTL starts
// at, and a lookup that counts predictions says when it looks
// (FindOptions.Now).
//
// # Locking
//
// A core is not safe for concurrent use unless its documentation says so.
// The shell that shares one serialises its calls, with a mutex or by owning
// it from one goroutine (the scheduler serialises its calls to the turns
// pipeline, the admission controller and the router; the engine shim's
// driver serialises its engine's; tracefile.Async calls a trace.Sink only
// from Run).
//
// The cores that lock do so because their readers run on the request path
// while a stream of writes goes on, and a lock held by the shell around
// every call would make each lookup wait for whole write batches:
//
//   - flashindex.Index and flashindex.PoolIndex: one RWMutex, with writes
//     chunked (Config.WriteChunk) so that FindMatches never waits long
//     behind a large event; one worker's events are applied in order by
//     one caller.
//   - registry.Registry: go-memdb serialises writers, and Route reads an
//     immutable snapshot without a transaction.
//   - tokenizer.Tokenizer implementations: immutable tables after Load,
//     with pooled scratch space, shared by every request.
//
// Nothing else in pkg/ locks, and a new core should not without being
// added to this list.
package pkg
