//go:build race

package testutil

// RaceEnabled reports a build with the race detector, which slows the
// exhaustive tests down tenfold, so they sample.
const RaceEnabled = true
