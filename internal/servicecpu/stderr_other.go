//go:build !linux

package servicecpu

// withoutStderr runs f; elsewhere than on Linux the runtime's complaint
// about the profile rate is left on stderr.
func withoutStderr(f func() error) (ferr, restoreErr error) { return f(), nil }
