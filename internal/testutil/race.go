package testutil

// RaceStride is how many crash or injection points an exhaustive test
// steps over at a time: n under the race detector, where the run without it
// (make test runs both) has already visited every point, else 1.
func RaceStride(n int) int {
	if RaceEnabled {
		return n
	}
	return 1
}
