package faultsuite

import (
	"os"
	"testing"
	"time"
)

func TestStatCPU(t *testing.T) {
	// Fields 14 and 15 (utime, stime) are 34 and 6 ticks: 400 ms.
	const rest = " S 1 2 3 4 5 6 7 8 9 10 34 6 11 12 20 0 1 0"
	for _, name := range []string{"(switchyard)", "(a ) b (c)", "()"} {
		got, err := statCPU("4242 " + name + rest)
		if err != nil || got != 400*time.Millisecond {
			t.Errorf("command %s: %v, %v; want 400ms", name, got, err)
		}
	}
	for _, bad := range []string{
		"",
		"4242 switchyard S 1",       // no parentheses
		"4242 (switchyard) S 1 2 3", // too few fields
		"4242 (sy) S 1 2 3 4 5 6 7 8 9 10 x 6 11", // utime not a number
	} {
		if d, err := statCPU(bad); err == nil {
			t.Errorf("statCPU(%q) = %v, want an error", bad, d)
		}
	}
}

func TestProcessCPUOfThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs Linux /proc")
	}
	before, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Burn CPU until /proc shows more than a tick of it (or give up).
	deadline := time.Now().Add(5 * time.Second)
	for x := 0; time.Now().Before(deadline); x++ {
		if x%1_000_000 == 0 {
			if now, err := processCPU(os.Getpid()); err == nil && now > before {
				return
			}
		}
	}
	t.Errorf("this process's CPU time stayed %v for 5 s of spinning", before)
}
