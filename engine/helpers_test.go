package engine

import (
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

func segmentAnchorDir(fs vfs.FS, dir, anchor string) string {
	return segment.AnchorDir(fs, dir, anchor)
}
func segmentFileName(segno uint64) string { return segment.FileName(segno) }

// raceStride is how many crash or injection points an exhaustive test steps
// over at a time: n under the race detector, where the run without it (make
// test runs both) has already visited every point, else 1.
func raceStride(n int) int {
	if raceEnabled {
		return n
	}
	return 1
}
