package registry

import "time"

// What a worker's heartbeats promise the scheduler, which sizes its sweep of
// lost turns by it (--stale-request-after): a worker heartbeats at most
// MaxHeartbeat apart, and names in each heartbeat the requests it has run
// for LongRunning or longer (schedulerv1.HeartbeatRequest's
// long_running_request_ids), so that a turn that runs long keeps its load.
// A stale age of at least MinStaleAge lets every such turn be named before
// it would be swept.
const (
	LongRunning  = 30 * time.Second
	MaxHeartbeat = 30 * time.Second
	MinStaleAge  = 2 * time.Minute
)
