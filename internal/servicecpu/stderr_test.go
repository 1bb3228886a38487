//go:build linux

package servicecpu

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// onStderr points file descriptor 2 at a new file for the rest of the test
// (the tests before may have left it anywhere) and returns the file.
func onStderr(t *testing.T) *os.File {
	t.Helper()
	saved, err := syscall.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Dup3(int(f.Fd()), 2, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Dup3(saved, 2, 0)
		syscall.Close(saved)
		f.Close()
	})
	return f
}

func fstat(t *testing.T, fd int) syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// While f runs, file descriptor 2 is /dev/null; after, it is what it was.
func TestWithoutStderrRestoresIt(t *testing.T) {
	file := onStderr(t)
	var null syscall.Stat_t
	if err := syscall.Stat(os.DevNull, &null); err != nil {
		t.Fatal(err)
	}
	var during syscall.Stat_t
	if ferr, err := withoutStderr(func() error { during = fstat(t, 2); return nil }); ferr != nil || err != nil {
		t.Fatal(ferr, err)
	}
	if during.Rdev != null.Rdev || during.Ino != null.Ino {
		t.Errorf("stderr during f is not %s", os.DevNull)
	}
	want := fstat(t, int(file.Fd()))
	if after := fstat(t, 2); after.Dev != want.Dev || after.Ino != want.Ino {
		t.Errorf("stderr after f is not what it was before")
	}
}

// Measure at 250 Hz leaves nothing on stderr (the runtime's complaint about
// the rate is kept off it) and leaves stderr where it was.
func TestMeasureAtARateWritesNothingToStderr(t *testing.T) {
	file := onStderr(t)
	if _, err := Measure("service", nil, 250, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	st := fstat(t, int(file.Fd()))
	if st.Size != 0 {
		b, _ := os.ReadFile(file.Name())
		t.Fatalf("stderr got %q", b)
	}
	if after := fstat(t, 2); after.Ino != st.Ino || after.Dev != st.Dev {
		t.Fatal("stderr moved")
	}
}
