//go:build linux

package servicecpu

import (
	"os"
	"syscall"
	"testing"
)

// While f runs, file descriptor 2 is /dev/null; after, it is what it was.
func TestWithoutStderrRestoresIt(t *testing.T) {
	stat := func(fd int) syscall.Stat_t {
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	var null syscall.Stat_t
	if err := syscall.Stat(os.DevNull, &null); err != nil {
		t.Fatal(err)
	}
	before := stat(2)
	var during syscall.Stat_t
	if err := withoutStderr(func() error { during = stat(2); return nil }); err != nil {
		t.Fatal(err)
	}
	if during.Rdev != null.Rdev || during.Ino != null.Ino {
		t.Errorf("stderr during f is not %s", os.DevNull)
	}
	if after := stat(2); after.Dev != before.Dev || after.Ino != before.Ino || after.Rdev != before.Rdev {
		t.Errorf("stderr after f is not what it was before")
	}
}
