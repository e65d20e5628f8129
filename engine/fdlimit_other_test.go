//go:build !unix

package engine

import "testing"

func openFDs() (int, bool)                { return 0, false }
func openSegmentFDs(string) (int, bool)   { return 0, false }
func lowerFDLimit(*testing.T, int) func() { return func() {} }
