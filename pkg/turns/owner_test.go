package turns

import (
	"fmt"
	"testing"

	"switchyard.dev/pkg/admission"
)

// Rendezvous ownership spreads programs evenly, and a replica leaving moves
// its programs only: every other program keeps its owner.
func TestOwnerSpreadsAndMovesOnlyTheLeaversPrograms(t *testing.T) {
	all := []string{"scheduler-0", "scheduler-1", "scheduler-2"}
	left := []string{"scheduler-0", "scheduler-2"}
	counts := make([]int, len(all))
	const n = 30_000
	for i := range n {
		k := admission.Key{Tenant: "t", SessionID: fmt.Sprint("s-", i)}
		o := Owner(k, all)
		counts[o]++
		after := left[Owner(k, left)]
		if all[o] != "scheduler-1" && after != all[o] {
			t.Fatalf("%v moved from %s to %s when scheduler-1 left", k, all[o], after)
		}
	}
	for i, c := range counts {
		if c < n/3*9/10 || c > n/3*11/10 {
			t.Errorf("%s owns %d of %d programs", all[i], c, n)
		}
	}
	if Owner(admission.Key{SessionID: "x"}, nil) != -1 {
		t.Error("Owner with no replicas is not -1")
	}
	// Tenants scope the id: the same session id of two tenants is two programs.
	diff := 0
	for i := range 100 {
		id := fmt.Sprint("s-", i)
		if Owner(admission.Key{Tenant: "a", SessionID: id}, all) != Owner(admission.Key{Tenant: "b", SessionID: id}, all) {
			diff++
		}
	}
	if diff == 0 {
		t.Error("the tenant does not enter the owner")
	}
}
