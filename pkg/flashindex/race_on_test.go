//go:build race

package flashindex

// raceEnabled shortens the longest randomized tests under the race detector,
// which slows them ~30×; the full length runs without it.
const raceEnabled = true
