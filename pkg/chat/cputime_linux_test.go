package chat

import (
	"syscall"
	"unsafe"
)

// threadCPU is the calling thread's CPU time in ns (CLOCK_THREAD_CPUTIME_ID),
// so benchmarks can report work done apart from time spent waiting for a
// core on a loaded machine. The caller locks itself to its OS thread.
func threadCPU() (int64, bool) {
	const clockThreadCPUTimeID = 3
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0, false
	}
	return ts.Nano(), true
}
