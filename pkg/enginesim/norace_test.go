//go:build !race

package enginesim

const raceEnabled = false
