package replay

import (
	"fmt"

	"github.com/zeebo/xxh3"

	"switchyard.dev/pkg/trace"
)

// Split names the part of a workload a run draws its sessions from.
type Split string

const (
	SplitAll Split = "all"
	// SplitTune is the half every default is chosen on: the top-level
	// sessions whose id hashes (xxh3-64) to an even number.
	SplitTune Split = "tune"
	// SplitTest is the other half, the one results are reported on.
	SplitTest Split = "test"
)

// ParseSplit maps a flag value to a Split.
func ParseSplit(s string) (Split, error) {
	switch Split(s) {
	case SplitAll, SplitTune, SplitTest:
		return Split(s), nil
	}
	return "", fmt.Errorf("replay: unknown split %q (want all, tune or test)", s)
}

// InSplit reports whether a top-level session belongs to the split. The
// rule depends only on the session's id, so a session is on the same side
// in every run, whatever else the workload holds.
func InSplit(sessionID string, s Split) bool {
	switch s {
	case SplitTune:
		return xxh3.HashString(sessionID)%2 == 0
	case SplitTest:
		return xxh3.HashString(sessionID)%2 == 1
	}
	return true
}

// SplitSessions returns the indices of the workload's top-level sessions in
// the split that have a turn, in workload order: the sessions a replay
// draws (a session without one would end as it starts, and a draw of only
// such sessions would never end).
func SplitSessions(w *trace.Workload, s Split) []int {
	var out []int
	for i, ss := range w.Sessions {
		if ss.Parent < 0 && len(ss.Turns) > 0 && InSplit(ss.ID, s) {
			out = append(out, i)
		}
	}
	return out
}
