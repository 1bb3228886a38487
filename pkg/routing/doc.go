// Package routing decides which worker serves a request: Dynamo's KV-overlap
// cost function, argmin/softmax selection, the in-flight load the router has
// itself put on each worker, session affinity and sub-agent placement, and the
// named policies a deployment chooses between (round_robin, least_loaded, kv,
// kv_affinity; session_aware is kv_affinity with admission control on top,
// applied by the caller through package admission).
//
// It is a pure core: time is passed in, randomness comes from an injected
// source, and nothing here starts a goroutine, opens a socket or reads the
// wall clock. A Router is not safe for concurrent use; the scheduler service
// serialises calls. It must never block and never call another service: the
// per-worker overlap it scores comes from the caller (the flash indexer's
// FindMatches).
package routing
