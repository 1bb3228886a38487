// Package replay is Switchyard's offline simulator: a discrete-event
// simulation on virtual time that replays a trace.Workload through the very
// cores the services run — W simulated engines (package enginesim), the
// flash index fed by their KV events (package flashindex), the router
// (package routing) and, for the session_aware policy, ThunderAgent-style
// admission control (package admission) — with no RPC in between.
// Optionally the engines share one Mooncake-like KV pool (package kvpool,
// Config.SharedPool) whose events feed the flash index's shared-pool index,
// and the KV hint policies (package hints, Config.Hints) run on the
// session-prefix index (package sessionindex) built from the engines'
// events, as the kvhint emitter does. Sessions
// are closed loops: a session's next turn is sent when its previous turn
// completes plus the turn's tool gap, and sub-agents run as child sessions
// that their parent's next turn waits for. A concurrency level is the number
// of top-level sessions active at once: a new session starts when one ends.
//
// Trace block sizes differ from the engine's (Weka 64, Mooncake 512 tokens
// per id): every trace id is expanded into the engine blocks it covers, each
// named by a local hash derived from the id and the block's position inside
// it, chained with kvhash.Chain, so that shared trace prefixes are shared
// engine prefixes and nothing else is.
//
// It must never read the wall clock, sleep or start goroutines: the same
// workload, configuration and seed give the same metrics, bit for bit. Work
// per simulated event is kept small (one FindMatches and one engine Add per
// turn, hash chains reused across a session's turns) so that the whole Weka
// corpus replays in about a minute on two cores.
package replay
