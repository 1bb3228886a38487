//go:build linux

package servicecpu

import (
	"fmt"
	"os"
	"syscall"
)

// withoutStderr runs f with the process's stderr (file descriptor 2, which
// the runtime writes its complaints to) pointed at /dev/null, and puts it
// back after. Whatever else writes to stderr meanwhile is lost, so f must
// be short.
func withoutStderr(f func() error) error {
	saved, err := syscall.Dup(2)
	if err != nil {
		return fmt.Errorf("servicecpu: saving stderr: %w", err)
	}
	defer syscall.Close(saved)
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("servicecpu: %w", err)
	}
	defer null.Close()
	if err := syscall.Dup3(int(null.Fd()), 2, 0); err != nil {
		return fmt.Errorf("servicecpu: silencing stderr: %w", err)
	}
	ferr := f()
	if err := syscall.Dup3(saved, 2, 0); err != nil {
		return fmt.Errorf("servicecpu: restoring stderr: %w", err)
	}
	return ferr
}
