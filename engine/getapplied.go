package engine

import (
	"context"
)

// GetApplied is Get without the wait for visibility: it reads the index as
// the applier has left it, so an append acknowledged but not yet applied —
// the caller's own included — may be missing from the answer. Get waits
// until every append acknowledged before it started is applied (reads are
// linearizable); under many concurrent durable appends that wait is most of
// a read's cost, and a writer that reads before each append loses the
// overlap of its fsync with the applier's work.
//
// It is for a caller that keeps its own writes in memory until it knows
// they are applied: a read that waits (any other read, or AnchorInfo)
// started after an append returned is the proof that the append is
// applied. The outbox package reads so.
//
// A database whose applier failed returns the failure, as every read does.
// A missing or deleted key returns ErrNotFound.
func (db *DB) GetApplied(ctx context.Context, key []byte) (Version, error) {
	if !db.reads.Enter() {
		return Version{}, errClosed
	}
	defer db.reads.Leave()
	if f := db.failed.Load(); f != nil {
		return Version{}, f
	}
	v, err := db.latest(ctx, db.index, key)
	if err != nil {
		return v, err
	}
	if v.Deleted {
		return Version{Key: v.Key, Deleted: true, Receipt: v.Receipt}, ErrNotFound
	}
	return v, nil
}
