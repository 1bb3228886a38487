package servicekit

// DefaultListLimit is how many items a List call returns when its request
// sets no limit.
const DefaultListLimit = 100

// ListLimit is how many items a List call whose request asked for limit
// returns: limit, or DefaultListLimit for 0.
func ListLimit(limit uint32) int {
	if limit == 0 {
		return DefaultListLimit
	}
	return int(limit)
}
