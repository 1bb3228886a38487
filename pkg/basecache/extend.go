package basecache

import (
	"slices"

	"switchyard.dev/pkg/extent"
)

// After is kept's first cut elements followed by add, and the extent of
// the array it is in. A session's next prompt repeats what its base had
// past the cut (the tokens of its last, partial block; hashes only when the
// sender cut short): when add begins with them, add's rest is appended
// after kept, in place when kept ends where its array is filled to
// (package extent), so that a 100k-token base is not copied at every turn.
// Otherwise it is a copy. No element of kept is written.
func After[T comparable](kept []T, ext *extent.Extent, cut int, add []T) ([]T, *extent.Extent) {
	if tail := kept[cut:]; len(add) >= len(tail) && slices.Equal(add[:len(tail)], tail) {
		grown, ext := extent.Extend(kept, ext, len(add)-len(tail))
		return append(grown, add[len(tail):]...), ext
	}
	grown, ext := extent.Extend(kept[:cut], nil, len(add))
	return append(grown, add...), ext
}
