package engine

import (
	"context"

	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

func segmentAnchorDir(fs vfs.FS, dir, anchor string) string {
	return segment.AnchorDir(fs, dir, anchor)
}
func segmentFileName(segno uint64) string { return segment.FileName(segno) }

// appendVisible appends e and returns its receipt and its anchor's head once
// the append is applied: heads are the applier's, and an append is
// acknowledged before it is applied. The receipt is zero if the append
// failed, set if only the wait did.
func appendVisible(ctx context.Context, db *DB, e Entry) (Receipt, anchorHead, error) {
	r, err := db.Append(ctx, e)
	if err != nil {
		return Receipt{}, anchorHead{}, err
	}
	if err := db.awaitVisible(ctx); err != nil {
		return r, anchorHead{}, err
	}
	db.anchorsMu.RLock()
	a := db.anchors[e.Anchor]
	db.anchorsMu.RUnlock()
	return r, a.snapshot(), nil
}
