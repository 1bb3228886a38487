package extent

import (
	"slices"
	"sync"
	"testing"
)

func TestExtendAppendsInPlaceOnce(t *testing.T) {
	a, extA := Extend([]int{1, 2, 3}, nil, 2) // not shared: always a copy
	if extA.Used() != 5 || cap(a) < 5 {
		t.Fatalf("a copy: used %d, cap %d", extA.Used(), cap(a))
	}
	a = append(a, 4, 5)
	// The list that ends where the array is filled extends in place.
	b, extB := Extend(a, extA, 1)
	if extB != extA || &b[0] != &a[0] || extA.Used() != 6 {
		t.Fatalf("in place: same extent %v, same array %v, used %d", extB == extA, &b[0] == &a[0], extA.Used())
	}
	b = append(b, 6)
	// A branch from a (a retry of b's turn) copies: b's element stays.
	c, extC := Extend(a, extA, 1)
	if extC == extA || &c[0] == &a[0] {
		t.Fatal("a branch from a list that no longer ends the array appended in place")
	}
	c = append(c, 7)
	if b[5] != 6 || c[5] != 7 || !slices.Equal(c[:5], a) {
		t.Fatalf("b %v, c %v", b, c)
	}
	// No room: a copy, even at the end.
	d, extD := Extend(b, extB, cap(b))
	if extD == extB || extB.Used() != 6 || !slices.Equal(d, b) {
		t.Fatalf("past the room: new extent %v, used %d", extD != extB, extB.Used())
	}
}

func TestClaimHoldsUntilSet(t *testing.T) {
	base, ext := Extend([]int(nil), nil, 4)
	base = append(base, 1, 2, 3, 4)
	held, hext := Claim(base, ext)
	if hext != ext || ext.Used() >= 0 {
		t.Fatalf("claim at the end: same extent %v, used %d", hext == ext, ext.Used())
	}
	// While claimed, the same list copies.
	other, oext := Extend(base, ext, 1)
	if oext == ext || &other[0] == &base[0] {
		t.Fatal("Extend appended in place into a claimed array")
	}
	if _, cext := Claim(base, ext); cext == ext {
		t.Fatal("a second Claim got the claimed array")
	}
	held = append(held, 5, 6)
	// The claimer keeps five and gives back the rest.
	ext.Set(5)
	next, next2 := Extend(held[:5], ext, 1)
	if next2 != ext || &next[0] != &held[0] || ext.Used() != 6 {
		t.Fatalf("after Set: in place %v, used %d", next2 == ext, ext.Used())
	}
}

// Of turns that extend one list at once, exactly one appends in place and
// none sees another's elements (run under -race).
func TestExtendConcurrentBranches(t *testing.T) {
	base, ext := Extend([]int(nil), nil, 8)
	base = append(base, 0, 1, 2, 3, 4, 5, 6, 7)
	const turns = 16
	out := make([][]int, turns)
	inPlace := make([]bool, turns)
	var wg sync.WaitGroup
	for i := range turns {
		wg.Go(func() {
			grown, e := Extend(base, ext, 3)
			inPlace[i] = e == ext
			out[i] = append(grown, 100+i, 100+i, 100+i)
		})
	}
	wg.Wait()
	n := 0
	for i, got := range out {
		if inPlace[i] {
			n++
		}
		want := append(slices.Clone(base), 100+i, 100+i, 100+i)
		if !slices.Equal(got, want) {
			t.Fatalf("turn %d: %v, want %v", i, got, want)
		}
	}
	if n != 1 {
		t.Fatalf("%d turns appended in place, want 1", n)
	}
}
