// Package admission is session-aware admission control after ThunderAgent
// (dynamo.md §4, workloads.md §1): a table of programs (agent sessions), each
// REASONING (a turn is generating) or ACTING (running a tool between turns)
// and ACTIVE, PAUSED or TERMINATED; a per-worker utilization of KV capacity;
// and a periodic tick that expires idle programs, soft-demotes programs on
// workers nearing the pause threshold, resumes paused programs by
// best-fit-decreasing packing, and pauses the smallest ACTING programs of a
// worker over the threshold. A paused program's next turn waits at the tool
// boundary rather than thrashing the engines' KV caches.
//
// ThunderAgentConfig is that policy with every default of dynamo.md §4.
// DefaultConfig departs from it in four ways: a paused program resumes on
// the worker that still holds its prefix, a program too large ever to fit
// under the resume ceiling is resumed once a worker is nearly free instead
// of starving until the forced resume, ACTING programs weigh a tenth of
// their tokens when deciding to pause (these three compared on the tune
// half of docs/results.md's sessions, among near-ties), and only GPU memory
// counts as a worker's capacity (lower tiers hold what paused programs
// leave behind; it matters only with them, and the GPU-only experiment
// leaves it untested).
//
// It is a pure core: time is passed in and nothing here starts a goroutine or
// reads the wall clock. A turn that must wait gets a Waiter whose channel is
// closed when the program may proceed; the service blocks on it with the
// client's deadline. The Controller is not safe for concurrent use: the
// scheduler serialises calls. It never picks a worker by KV overlap itself;
// it narrows the choice (a pinned worker, or the workers with room) and
// package routing scores.
package admission
