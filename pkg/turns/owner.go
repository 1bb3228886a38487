package turns

import (
	"github.com/zeebo/xxh3"

	"switchyard.dev/pkg/admission"
)

// Owner is which of replicas (scheduler replicas' names) owns the program
// of key: the one whose name hashes highest with the tenant-scoped session
// id (rendezvous hashing). Every frontend computes it alone, without a
// lookup; when a replica leaves, only its programs move, each to the replica
// that ranked next for it. A sub-agent's program goes with its root
// session's (callers pass the root's key): the replica that routes the parent
// holds the binding a sub-agent follows. It returns -1 for no replicas.
func Owner(key admission.Key, replicas []string) int {
	best, bestScore := -1, uint64(0)
	for i, r := range replicas {
		h := xxh3.New()
		h.WriteString(r)
		h.Write([]byte{0})
		h.WriteString(key.Tenant)
		h.Write([]byte{0})
		h.WriteString(key.SessionID)
		if sc := h.Sum64(); best < 0 || sc > bestScore {
			best, bestScore = i, sc
		}
	}
	return best
}
