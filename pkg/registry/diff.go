package registry

// ChangeType says how the worker set changed.
type ChangeType uint8

const (
	Added ChangeType = iota + 1
	Updated
	Removed
)

// Change is one difference between two membership snapshots.
type Change struct {
	Type   ChangeType
	Worker Worker // as it is now; as it was last for Removed
}

// Diff returns the changes that turn prev into next. Both must be sorted by
// id, as Members returns them. Watchers of the worker set call it on each
// wake-up to turn snapshots into a stream of events.
func Diff(prev, next []Worker) []Change {
	var out []Change
	i, j := 0, 0
	for i < len(prev) || j < len(next) {
		switch {
		case j == len(next) || (i < len(prev) && prev[i].ID < next[j].ID):
			out = append(out, Change{Type: Removed, Worker: prev[i]})
			i++
		case i == len(prev) || next[j].ID < prev[i].ID:
			out = append(out, Change{Type: Added, Worker: next[j]})
			j++
		default:
			if !sameMembership(&prev[i], &next[j]) || !prev[i].RegisteredAt.Equal(next[j].RegisteredAt) {
				out = append(out, Change{Type: Updated, Worker: next[j]})
			}
			i, j = i+1, j+1
		}
	}
	return out
}
