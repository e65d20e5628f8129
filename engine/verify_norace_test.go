//go:build !race

package engine

// raceEnabled: see verify_race_test.go.
const raceEnabled = false
