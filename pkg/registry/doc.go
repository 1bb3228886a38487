// Package registry is the scheduler's worker registry: which engine workers
// exist, what they can hold, how loaded they are, and the leases that keep
// them alive. It is kept in go-memdb so that readers (Route, WatchWorkers) run
// on lock-free snapshots and can block on watch sets until membership
// changes, the way Nomad and Consul keep their state stores.
//
// Membership and load live in two tables on purpose: heartbeats rewrite the
// load every few seconds, and watchers of the worker set (indexers, session
// indexers) must not wake for that.
//
// It is a pure core: time is passed in, and it never starts a goroutine or
// reads the wall clock. Expiry happens when the caller calls Expire.
package registry
