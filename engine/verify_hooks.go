package engine

import (
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/transparency-dev/merkle/compact"
)

// The few places where verification, proofs and checkpoints reach into the
// commit path's state. They are gathered here so that a change to how
// commits publish their work has one file to follow.
//
// What they rely on, in the order a commit does its work:
//
//  1. a group's segment bytes reach the anchor's buffer (or its file),
//  2. its index batch is applied,
//  3. its anchors' visible heads and trees are published under a.mu,
//  4. the applied group id advances (commit.go),
//  5. its appends leave admission — unless the group was acknowledged early,
//     when they left it before step 1, after the acknowledged id was raised.
//
// So a visible head captured before a Pebble snapshot is covered by the
// snapshot's rows; every row of the snapshot has its frame in the file once
// the anchor's buffer has been flushed after the snapshot; and frames past
// the snapshot's rows belong to appends still in flight, unless admission is
// empty, every acknowledged group is applied, and the published head does
// not cover them.

// anchorView is an anchor's published state at one moment.
type anchorView struct {
	head   anchorHead
	tree   *compact.Range // never mutated once published
	damage *errs.Error
}

// view returns the anchor's visible head, tree and damage, read together.
func (a *anchor) view() anchorView {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return anchorView{head: a.vis, tree: a.visTree, damage: a.damage}
}

// root returns the root of the view's tree (the empty root for none).
func (v anchorView) root() segment.Hash {
	var out segment.Hash
	if v.tree == nil || v.tree.End() == 0 {
		copy(out[:], segment.Blake3RFC6962.EmptyRoot())
		return out
	}
	r, err := v.tree.GetRootHash(nil)
	if err != nil || len(r) != segment.HashSize {
		// NB: a published range starts at 0 and is not empty here, so
		// GetRootHash cannot fail; an impossible failure reads as a root
		// that matches nothing.
		return out
	}
	copy(out[:], r)
	return out
}

// flushSegmentBytes writes the anchor's buffered segment bytes to its file,
// so a reader of the file sees every frame the index names. It does nothing
// once writes have stopped (the bytes on disk are then all there is) — but
// if writing this anchor's bytes is what failed, the file holds whatever the
// failed write left where the index names frames: the anchor cannot be
// checked, which is IO_001, not damage to report.
//
// NB: it writes while Close is under way too. A reader inside the read
// gate keeps Close from closing the files, and until Close's settle has
// run (it first waits for the appends it admitted) the newest frames may
// be in the buffer alone: a Verify that skipped them read a file short of
// its index and reported a sound anchor damaged, and Close recorded it
// (TestVerifyRacingCloseFindsNoDamage).
func (db *DB) flushSegmentBytes(a *anchor) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	if a.wbuf.failed != nil {
		return db.fail(a.wbuf.failed)
	}
	if db.failed.Load() != nil {
		return nil
	}
	if err := db.flushBufferLocked(a); err != nil {
		return db.fail(err)
	}
	return nil
}

// appendsInFlight reports whether any append has been admitted and not yet
// applied: while none is, the published heads cover every frame in the
// segment files. Admission is read first: an append acknowledged early
// raised the acknowledged id before it left admission, so either it is
// counted there or the ids show its group unapplied.
func (db *DB) appendsInFlight() bool {
	if n, _ := db.adm.InFlight(); n > 0 {
		return true
	}
	return db.commit.vis.applied.Load() < db.commit.vis.acked.Load()
}

// loadedAnchor returns the anchor's state, loading it from the index if
// needed, or nil when the index does not know it.
func (db *DB) loadedAnchor(id string) (*anchor, error) {
	return db.getAnchor(id, false)
}
