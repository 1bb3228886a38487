// Package scheduler is the scheduler service: the worker registry with
// leases, routing of each turn to the worker that already holds most of its
// prompt in KV cache (asking the flash indexer for per-worker overlap), and
// session-aware admission control over the program table.
//
// It is a thin shell: the decisions live in switchyard.dev/pkg/registry,
// pkg/routing and pkg/admission, which are pure and run on an injected
// clock. This package owns the gRPC surface, the goroutines (lease expiry,
// the admission tick, blocked Route calls, watch streams), metrics and
// logs. It serialises every call into the routing and admission cores under
// one mutex; the registry is go-memdb and needs no lock.
//
// It must never block a Route on anything but admission (the flash indexer
// is asked with a short deadline, and an unreachable indexer means zero
// overlap, not a failed route) and never hold its mutex across a network
// call.
package scheduler
