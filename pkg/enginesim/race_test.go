//go:build race

package enginesim

// raceEnabled shortens the randomized tests under the race detector, which
// slows this single-goroutine package tenfold without finding anything new.
const raceEnabled = true
