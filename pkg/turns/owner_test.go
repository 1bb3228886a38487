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

// Rank starts with Owner, and dropping the owner leaves the rest in order:
// the next in rank is the owner among the others.
func TestRankIsOwnerThenTheNextOwners(t *testing.T) {
	all := []string{"scheduler-0", "scheduler-1", "scheduler-2", "scheduler-3"}
	var rank []int
	for i := range 2000 {
		k := admission.Key{Tenant: "t", SessionID: fmt.Sprint("s-", i)}
		rank = Rank(k, all, rank)
		if len(rank) != len(all) || rank[0] != Owner(k, all) {
			t.Fatalf("%v: rank %v, owner %d", k, rank, Owner(k, all))
		}
		rest := []string{}
		for _, j := range rank[1:] {
			rest = append(rest, all[j])
		}
		if got := rest[Owner(k, rest)]; got != all[rank[1]] {
			t.Fatalf("%v: without its owner the owner is %s, rank says %s", k, got, all[rank[1]])
		}
	}
	if len(Rank(admission.Key{}, nil, rank)) != 0 {
		t.Error("Rank of no replicas is not empty")
	}
}
