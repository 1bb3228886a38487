//go:build linux

package servicecpu

import (
	"fmt"
	"os"
	"syscall"
)

// withoutStderr runs f with the process's stderr (file descriptor 2, which
// the runtime writes its complaints to) pointed at /dev/null, and puts it
// back after, panic or not. Whatever else writes to stderr meanwhile is
// lost, so f must be short. restoreErr says stderr could not be put back
// (f ran, and returned ferr).
func withoutStderr(f func() error) (ferr, restoreErr error) {
	// The saved copy closes on exec, so a child started meanwhile does not
	// inherit it.
	saved, _, errno := syscall.Syscall(syscall.SYS_FCNTL, 2, syscall.F_DUPFD_CLOEXEC, 0)
	if errno != 0 {
		return nil, fmt.Errorf("servicecpu: saving stderr: %w", errno)
	}
	defer syscall.Close(int(saved))
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("servicecpu: %w", err)
	}
	defer null.Close()
	if err := syscall.Dup3(int(null.Fd()), 2, 0); err != nil {
		return nil, fmt.Errorf("servicecpu: silencing stderr: %w", err)
	}
	defer func() {
		if err := syscall.Dup3(int(saved), 2, 0); err != nil {
			restoreErr = fmt.Errorf("servicecpu: restoring stderr: %w", err)
		}
	}()
	return f(), nil
}
