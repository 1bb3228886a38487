//go:build unix

package admission

import (
	"syscall"
	"time"
)

// cpuTime is the process's user+system CPU time: benchmarks report it per op
// because wall time swings on a shared, loaded machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
