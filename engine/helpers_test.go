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

// raceStride is how many crash or injection points an exhaustive test steps
// over at a time: n under the race detector, where the run without it (make
// test runs both) has already visited every point, else 1.
func raceStride(n int) int {
	if raceEnabled {
		return n
	}
	return 1
}

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
