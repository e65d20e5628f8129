package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/engine/internal/treestore"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
)

// Proofs (SPEC §5) are built by the proof package over the index's tree
// nodes (treestore.Index). Each call reads at one consistent point: the
// anchor's visible head and tree, captured under its lock, then a Pebble
// snapshot, which holds every row that head covers.

// treeReader is one consistent read point of an anchor's tree.
type treeReader struct {
	db     *DB
	anchor string
	view   anchorView
	snap   *pebble.Snapshot
}

// readTree captures the anchor's head, then a snapshot of the index. An
// unknown anchor is STATE_003.
func (db *DB) readTree(anchor string) (*treeReader, error) {
	if err := segment.ValidateAnchorID(anchor); err != nil {
		return nil, err
	}
	if db.closed.Load() {
		return nil, errClosed
	}
	a, err := db.loadedAnchor(anchor)
	if err != nil {
		return nil, err
	}
	if a == nil {
		return nil, errs.New(errs.CodeDependencyMissing, "anchor %q is not in the database", anchor).At(anchor, 0, "", 0)
	}
	t := &treeReader{db: db, anchor: anchor, view: a.view()}
	t.snap = db.index.NewSnapshot()
	return t, nil
}

func (t *treeReader) close() { _ = t.snap.Close() }

// size is the number of records the read point covers.
func (t *treeReader) size() uint64 { return t.view.head.head }

func (t *treeReader) store() treestore.Index {
	return treestore.Index{R: t.snap, Anchor: t.anchor}
}

// checkSize resolves size 0 to the current size and refuses a size beyond it.
func (t *treeReader) checkSize(size uint64) (uint64, error) {
	cur := t.size()
	if size == 0 {
		return cur, nil
	}
	if size > cur {
		return 0, errs.New(errs.CodeDependencyMissing, "anchor %q has %s: there is no tree of size %d", t.anchor, plural(cur, "record"), size).At(t.anchor, size, "", 0)
	}
	return size, nil
}

// leaf returns the hash of record seq: the Merkle leaf's input. A record
// still in its segment is read and checked against its hash and the
// snapshot's 's' row. A truncated record's row is all that is left of it,
// kept for this: its hash is the leaf, and the proof built from it is
// checked by whoever holds the root, not by trusting us.
func (t *treeReader) leaf(ctx context.Context, seq uint64) (segment.Hash, error) {
	if err := ctx.Err(); err != nil {
		return segment.Hash{}, err
	}
	v, closer, err := t.snap.Get(schema.SeqKey(t.anchor, seq))
	if errors.Is(err, pebble.ErrNotFound) {
		return segment.Hash{}, errs.New(errs.CodeIndexMismatch, "anchor %q: no index row for seq %d", t.anchor, seq).At(t.anchor, seq, "", 0)
	}
	if err != nil {
		return segment.Hash{}, errs.Wrap(errs.CodeWriteFailed, err, "read index")
	}
	e, err := schema.DecodeLocation(v)
	closer.Close()
	if err != nil {
		return segment.Hash{}, errs.Wrap(errs.CodeIndexMismatch, err, "anchor %q seq %d", t.anchor, seq).At(t.anchor, seq, "", 0)
	}
	if e.Size == 0 {
		return e.Hash, nil
	}
	fr := t.db.newFrameReader(t.anchor)
	defer fr.close()
	rec, err := fr.read(seq, e)
	if errs.CodeOf(err) == errs.CodeDependencyMissing {
		// A compaction truncated the segment after the snapshot was taken
		// (the reader found the live row truncated and no kept copy): the
		// snapshot's row still holds the hash.
		return e.Hash, nil
	}
	return rec.Hash, err
}

// sameAsMemory checks a root the index gives at the current size against
// the in-memory tree.
func (t *treeReader) sameAsMemory(size uint64, root segment.Hash) error {
	if size != t.size() {
		return nil
	}
	if mem := t.view.root(); mem != root {
		return errs.New(errs.CodeIndexMismatch, "anchor %q: the index's tree of size %d has root %s, the in-memory tree %s", t.anchor, size, root, mem).At(t.anchor, size, "", 0)
	}
	return nil
}

// ProveInclusion returns the proof that record seq of anchor is in the
// anchor's tree of the given size (0: the current size), in the SPEC §10
// shape. The record is read from its segment and checked (a truncated
// record's hash comes from its index row), and the proof is built from the
// index. An unknown anchor, a size beyond the anchor's or a
// seq beyond the size is STATE_003; seq 0 or a bad anchor id INPUT_001.
func (db *DB) ProveInclusion(ctx context.Context, anchor string, seq, size uint64) (*proof.InclusionProof, error) {
	if db.filesOnly() {
		return db.fileProveInclusion(ctx, anchor, seq, size) // a read-only open without the index
	}
	if err := db.beginRead(ctx); err != nil {
		return nil, err
	}
	defer db.endRead()
	t, err := db.readTree(anchor)
	if err != nil {
		return nil, err
	}
	defer t.close()
	if seq == 0 {
		return nil, errs.New(errs.CodeInvalidInput, "seq 0 does not exist (seqs start at 1)").At(anchor, 0, "", 0)
	}
	if size, err = t.checkSize(size); err != nil {
		return nil, err
	}
	if seq > size {
		return nil, errs.New(errs.CodeDependencyMissing, "anchor %q: seq %d is not in the tree of size %d", anchor, seq, size).At(anchor, seq, "", 0)
	}
	leaf, err := t.leaf(ctx, seq)
	if err != nil {
		return nil, err
	}
	p, err := proof.ProveInclusion(ctx, t.store(), anchor, seq, size, leaf)
	if err != nil {
		return nil, err
	}
	if err := t.sameAsMemory(size, p.Root); err != nil {
		return nil, err
	}
	return p, nil
}

// ProveConsistency returns the proof that anchor's tree of oldSize records
// is a prefix of its tree of newSize records (0: the current size), with
// both roots, in the SPEC §10 shape. oldSize > newSize is INPUT_001; an
// unknown anchor or a size beyond the anchor's STATE_003.
func (db *DB) ProveConsistency(ctx context.Context, anchor string, oldSize, newSize uint64) (*proof.ConsistencyProof, error) {
	if db.filesOnly() {
		return db.fileProveConsistency(ctx, anchor, oldSize, newSize) // a read-only open without the index
	}
	if err := db.beginRead(ctx); err != nil {
		return nil, err
	}
	defer db.endRead()
	t, err := db.readTree(anchor)
	if err != nil {
		return nil, err
	}
	defer t.close()
	if newSize, err = t.checkSize(newSize); err != nil {
		return nil, err
	}
	if oldSize > newSize {
		return nil, errs.New(errs.CodeInvalidInput, "consistency proof from size %d down to %d", oldSize, newSize).At(anchor, 0, "", 0)
	}
	p, err := proof.ProveConsistency(ctx, t.store(), anchor, oldSize, newSize)
	if err != nil {
		return nil, err
	}
	if err := t.sameAsMemory(newSize, p.NewRoot); err != nil {
		return nil, err
	}
	return p, nil
}

// AnchorRoot returns the root of anchor's tree of the given size (0: the
// current size) and the size it is for. The current root comes from memory;
// an older one from the index. An unknown anchor or a size beyond the
// anchor's is STATE_003.
func (db *DB) AnchorRoot(ctx context.Context, anchor string, size uint64) (segment.Hash, uint64, error) {
	if db.filesOnly() {
		return db.fileAnchorRoot(ctx, anchor, size) // a read-only open without the index
	}
	if err := db.beginRead(ctx); err != nil {
		return segment.Hash{}, 0, err
	}
	defer db.endRead()
	t, err := db.readTree(anchor)
	if err != nil {
		return segment.Hash{}, 0, err
	}
	defer t.close()
	if size, err = t.checkSize(size); err != nil {
		return segment.Hash{}, 0, err
	}
	if size == t.size() {
		return t.view.root(), size, nil
	}
	r, err := proof.RootAt(ctx, t.store(), size)
	if err != nil {
		return segment.Hash{}, 0, fmt.Errorf("anchor %q: %w", anchor, err)
	}
	var out segment.Hash
	copy(out[:], r)
	return out, size, nil
}

// consistencyProver serves proof.CheckConsistent from one snapshot.
func consistencyProver(snap *pebble.Snapshot) proof.ConsistencyProver {
	return func(ctx context.Context, anchor string, oldSize, newSize uint64) ([][]byte, error) {
		return proof.Consistency(ctx, treestore.Index{R: snap, Anchor: anchor}, oldSize, newSize)
	}
}
