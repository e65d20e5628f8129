package engine

import (
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

func segmentAnchorDir(fs vfs.FS, dir, anchor string) string {
	return segment.AnchorDir(fs, dir, anchor)
}
func segmentFileName(segno uint64) string { return segment.FileName(segno) }
