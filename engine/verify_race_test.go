//go:build race

package engine

// raceEnabled: the race detector slows the exhaustive tests down tenfold, so
// they sample.
const raceEnabled = true
