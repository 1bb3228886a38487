// Package turns is the per-turn scheduling decision of the fleet: admit a
// turn (admission control), place it (candidates restricted to the workers
// with room, routing, placement), account for its end (finish, session end)
// and run the periodic control step. The scheduler service and the replay
// simulator both drive a Pipeline, so a simulated row describes what the
// live scheduler decides; the shells only gather the inputs (the registry
// and the flash indexer's overlaps live, the simulated engines and index in
// replay), keep the clock and lock.
//
// A Pipeline is not safe for concurrent use: the scheduler holds its lock
// around every call, replay is single-threaded.
package turns
