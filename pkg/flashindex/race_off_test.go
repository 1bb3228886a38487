//go:build !race

package flashindex

const raceEnabled = false
