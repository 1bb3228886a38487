package servicekit

import "testing"

func TestListLimit(t *testing.T) {
	for in, want := range map[uint32]int{0: DefaultListLimit, 1: 1, 500: 500} {
		if got := ListLimit(in); got != want {
			t.Errorf("ListLimit(%d) = %d, want %d", in, got, want)
		}
	}
}
