package turns

import (
	"slices"

	"github.com/zeebo/xxh3"

	"switchyard.dev/pkg/admission"
)

// Owner is which of replicas (scheduler replicas' names) owns the program
// of key: the one whose name hashes highest with the tenant-scoped session
// id (rendezvous hashing). Every frontend computes it alone, without a
// lookup; when a replica leaves, only its programs move, each to the replica
// that ranked next for it. A sub-agent's program goes with its parent's
// (callers pass OwnerKey): the replica that routes the parent holds the
// binding a sub-agent follows. It returns -1 for no replicas.
func Owner(key admission.Key, replicas []string) int {
	best, bestScore := -1, uint64(0)
	for i, r := range replicas {
		if sc := ownerScore(key, r); best < 0 || sc > bestScore {
			best, bestScore = i, sc
		}
	}
	return best
}

// OwnerKey is the key a turn's owner is computed from: the session's own,
// or for a sub-agent (parentSessionID set) its parent's, in the same tenant.
// A frontend knows a turn's parent, not its root, so a sub-agent of a
// sub-agent goes with its own parent.
func OwnerKey(key admission.Key, parentSessionID string) admission.Key {
	if parentSessionID != "" {
		key.SessionID = parentSessionID
	}
	return key
}

// Rank is every replica in the order it would own key's program: Owner
// first, then the one that owns it when Owner is gone, and so on. A frontend
// whose Route call to the owner fails asks the next (into out, reused).
func Rank(key admission.Key, replicas []string, out []int) []int {
	out = out[:0]
	scores := make([]uint64, len(replicas))
	for i, r := range replicas {
		out = append(out, i)
		scores[i] = ownerScore(key, r)
	}
	slices.SortFunc(out, func(a, b int) int {
		switch {
		case scores[a] > scores[b]:
			return -1
		case scores[a] < scores[b]:
			return 1
		}
		return a - b
	})
	return out
}

func ownerScore(key admission.Key, replica string) uint64 {
	h := xxh3.New()
	h.WriteString(replica)
	h.Write([]byte{0})
	h.WriteString(key.Tenant)
	h.Write([]byte{0})
	h.WriteString(key.SessionID)
	return h.Sum64()
}
