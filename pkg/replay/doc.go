// Package replay is Switchyard's offline simulator: a discrete-event
// simulation on virtual time that replays a trace.Workload through the very
// cores the services run — W simulated engines (package enginesim), the
// flash index fed by their KV events (package flashindex), the router
// (package routing) and, for the admission policies, ThunderAgent-style
// admission control (package admission) — with no RPC in between.
// Optionally the engines share one Mooncake-like KV pool (package kvpool,
// Config.SharedPool) whose events feed the flash index's shared-pool index,
// and the KV hint policies (package hints, Config.Hints) run on the
// session-prefix index (package sessionindex) built from the engines'
// events, as the kvhint emitter does.
//
// A run is one experiment point: a Policy (routing, the admission in front
// of it, for the oracle the cluster), a concurrency level C and a seed,
// measured over one window. Sessions are drawn with replacement from a
// Split of the workload, each draw in its own hash namespace, and a closed
// loop keeps C of them active: a session's next turn is sent when its
// previous turn completes plus the turn's tool gap, sub-agents run as child
// sessions that their parent's next turn waits for, and when a session ends
// the next draw starts. The draws are one seeded sequence, the same for
// every policy. The first C sessions join as a measurement of a running
// fleet finds them (drawn in proportion to their time alone, at a uniform
// point of it). Only the window after the warmup is measured, and the turns
// still waiting when it closes count with their waits so far (Result).
// Aggregate folds a point's seeds into a Row.
//
// Trace block sizes differ from the engine's (Weka 64, Mooncake 512 tokens
// per id): every trace id is expanded into the engine blocks it covers, each
// named by a local hash derived from the id, the block's position inside it
// and the draw's namespace, chained with kvhash.Chain, so that shared trace
// prefixes are shared engine prefixes and nothing else is.
//
// It must never read the wall clock, sleep or start goroutines: the same
// workload, configuration and seed give the same metrics, bit for bit. Work
// per simulated event is kept small (one FindMatches and one engine Add per
// turn, hash chains reused across a session's turns), so that a point of
// the Weka corpus over a 2 hour window replays in seconds.
package replay
