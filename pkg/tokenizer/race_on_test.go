//go:build race

package tokenizer

// raceEnabled shrinks the slowest differential tests under -race: the
// package starts no goroutines, so the race detector has little to find in
// them, and instrumented BPE is ten times slower.
const raceEnabled = true
