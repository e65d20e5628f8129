//go:build !race

package testutil

// RaceEnabled reports a build with the race detector (see race_on.go).
const RaceEnabled = false
