//go:build !unix

package testutil

import "testing"

// OpenFDs counts this process's open descriptors: not on this platform.
func OpenFDs() (n int, ok bool) { return 0, false }

// OpenSegmentFDs counts descriptors open on segment files: not on this
// platform.
func OpenSegmentFDs(string) (n int, ok bool) { return 0, false }

// LowerFDLimit changes nothing on this platform.
func LowerFDLimit(testing.TB, int) (restore func()) { return func() {} }
