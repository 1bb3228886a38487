package servicekit

import "testing"

func TestNewEpochIsNonZeroAndFresh(t *testing.T) {
	a, b := NewEpoch(), NewEpoch()
	if a == 0 || b == 0 || a == b {
		t.Fatalf("epochs %d and %d: want two different non-zero ones", a, b)
	}
}
