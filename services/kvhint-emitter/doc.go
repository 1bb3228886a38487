// Package kvhintemitter is the KV hint emitter service: the shell around
// pkg/hints. It follows the scheduler's program lifecycle (WatchPrograms: a
// snapshot of the table, after which programs the snapshot lacks are
// forgotten, then every change its enabled policies need: each turn's
// reasoning and acting changes only while demote_long_tool_call, the one
// policy that follows them, is on; hints.Config.Unwatched) and worker set
// (WatchWorkers, which also carries each worker's KV usage and the hints its
// engine acts on, as the shim announced them), reads session lineage from the
// session-prefix indexer — one GetSessionLineages call per round with every
// lookup the round needs, each chain with its shared count (an indexer that
// refuses it is read one GetSessionLineage per lookup for a minute) — runs
// the hint policies on a tick and on every lifecycle change, and sends each
// worker what pkg/hints.Nearest makes of the resulting actions for its engine
// (a retain in place of a demote on vLLM and SGLang; nothing it cannot act
// on) as one versioned KvHintEnvelope (protocol "0.1", a unique message id)
// per worker and round. It records every engine answer (accepted, clipped,
// deferred, rejected) and serves ListPolicies, ListRecentHints and GetStats
// over gRPC and REST.
//
// What each hint earns, on one simulated worker with 60 coding agents
// (go test ./hints -run '^$' -bench HintsEffect -benchtime 1x in pkg/):
// releasing finished sessions first cuts re-prefilled tokens by about a
// fifth to a quarter; demoting during long tool calls (with the prefetch
// that undoes it) adds 6–13%, because the simulated engine already moves
// what it evicts to host memory, so an early demote only empties GPU blocks
// while it pushes others out of host memory. demote_long_tool_call is
// therefore off by default (--disable-policies= turns everything on).
// Share and the pause demote need a fleet and admission control to show;
// the replay harness measures them.
//
// One goroutine owns the policy engine (the core is single-threaded); the
// watchers feed it through channels and the API reads snapshots it
// publishes. The service must never decide anything itself: what to hint is
// pkg/hints' job, the shell only moves data and records outcomes.
package kvhintemitter
