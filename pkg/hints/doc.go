// Package hints holds the KV hint policies of the kvhint emitter: rules that
// turn program lifecycle (the scheduler's WatchPrograms stream), session
// lineage (the session-prefix indexer) and worker load into soft KV hints —
// Demote a session's blocks to host during a long tool call or while
// admission control has it paused, Prefetch them back when it resumes or its
// next turn starts, Share a parent's prefix with a sub-agent placed on
// another worker, and release a finished session's blocks first.
//
// It is also Switchyard's one hint vocabulary (kind.go): Kind and Result,
// which the simulated engine executes and answers in (enginesim.Hint) and
// the services translate to and from the wire; Capability and Support, what
// an engine announces it acts on when its shim registers; and Nearest, the
// one place that decides what a worker is sent for a proposal — the action
// itself, the nearest kind its engine takes (a retain for a demote), or
// nothing. Program state is admission control's (Phase, Lifecycle,
// ProgramOf).
//
// Each policy is a type behind one interface (policy.go), in its own file
// with the state only it needs; adding a policy touches that file. A round
// of Decide asks every policy which lineage it needs, reads them all at once
// (one call on a BatchView), lets each propose, and records a proposal only
// when it is admitted.
//
// Hints state intent; engines decide. A lost or refused hint never changes
// correctness, so the policies favour doing nothing over guessing: every
// action names the blocks the lineage says the session built, and each
// worker has a rate limit (hints per second) and a budget (blocks moved per
// second), both token buckets on the caller's clock.
//
// The package is a pure core: no goroutines, no sockets, no wall clock (now
// is passed in) and no protobuf. The lineage, load and hint support it needs
// come through the View interfaces, which the service implements over gRPC,
// the replay over its simulated cluster, and tests with a map. An Engine is
// not safe for concurrent use.
package hints
