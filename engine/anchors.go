package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/engine/internal/treestore"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/transparency-dev/merkle/compact"
)

// anchor is the in-memory state of one anchor log.
//
// It holds two heads. The leader's head (anchorHead) is where the next
// commit group continues: commit leaders own it, one at a time, and advance
// it as soon as a group is written to the journal. The visible head (vis,
// visTree), under mu, is what readers see: it advances when a group has been
// applied to the index, so it never runs ahead of what reads can find. The
// Merkle range (tree) is the applier's: it is extended as groups are staged
// for the index, ahead of visTree by the groups of the round being applied.
type anchor struct {
	id  string
	dir string // directory of its segments

	// Owned by the commit leader (and by Open before any commit).
	anchorHead
	activeChecked bool // checkActiveSegment ran this session

	// Owned by the applier (and by Open before any commit).
	tree *compact.Range // Merkle compact range of the groups staged so far

	// Owned by whoever holds wmu: the applier, a flushing reader, a settle.
	wmu      sync.Mutex
	wbuf     segBuffer // segment bytes not yet written to the file
	dirReady bool      // the anchor directory is known to exist

	mu      sync.RWMutex
	vis     anchorHead
	visTree *compact.Range // never mutated once published
	// damage, when set, makes the anchor read-only (SPEC §3).
	damage *errs.Error
}

// anchorHead is the part of an anchor's state a commit group works on in its
// overlay and publishes when the group is applied.
type anchorHead struct {
	head        uint64       // seq of the last record; 0 when empty
	headHash    segment.Hash // hash of the last record, or the genesis hash
	lastCounter uint64
	// The active segment: the one the next record goes to.
	segno     uint64       // 0 before the first record
	segFirst  uint64       // first seq of the active segment
	segSize   int64        // bytes written to it; 0 when not yet created
	segHeader segment.Hash // its header checksum, for the seal
	segCount  uint64       // records in it
	stored    bool         // an 'a' row exists
}

var merkleFactory = &compact.RangeFactory{Hash: segment.Blake3RFC6962.HashChildren}

// snapshot returns a consistent copy of the visible head.
func (a *anchor) snapshot() anchorHead {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.vis
}

// visibleTree returns the compact range of the visible head. Callers must not
// modify it.
func (a *anchor) visibleTree() *compact.Range {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.visTree
}

// publish makes head and tree both the leader's and the visible state. It is
// for Open and recovery, when no commit runs.
func (a *anchor) publish(head anchorHead, tree *compact.Range) {
	a.anchorHead, a.tree = head, tree
	a.mu.Lock()
	a.vis, a.visTree = head, tree
	a.mu.Unlock()
}

func (a *anchor) damaged() *errs.Error {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.damage
}

// getAnchor returns the anchor's state, loading it from the index on first
// use. With create false, an anchor with no records yields (nil, nil).
func (db *DB) getAnchor(id string, create bool) (*anchor, error) {
	db.anchorsMu.RLock()
	a := db.anchors[id]
	db.anchorsMu.RUnlock()
	if a != nil {
		return a, nil
	}
	loaded, err := db.loadAnchor(id)
	if err != nil {
		return nil, err
	}
	if loaded == nil && !create {
		return nil, nil
	}
	db.anchorsMu.Lock()
	defer db.anchorsMu.Unlock()
	if a := db.anchors[id]; a != nil {
		return a, nil
	}
	if loaded == nil {
		loaded = &anchor{id: id, dir: segment.AnchorDir(db.fs, db.dir, id)}
		loaded.publish(anchorHead{headHash: segment.GenesisHash(id)}, merkleFactory.NewEmptyRange(0))
	}
	db.anchors[id] = loaded
	return loaded, nil
}

// loadAnchor reads an anchor's head from the index: its 'a' row and its last
// 's' row. It returns nil when the index knows no such anchor.
func (db *DB) loadAnchor(id string) (*anchor, error) {
	metaVal, closer, err := db.index.Get(schema.AnchorKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "read anchor %q", id)
	}
	meta, err := schema.DecodeAnchorMeta(metaVal)
	closer.Close()
	if err != nil {
		return nil, errs.Wrap(errs.CodeIndexMismatch, err, "anchor %q", id)
	}
	a := &anchor{id: id, dir: segment.AnchorDir(db.fs, db.dir, id), dirReady: true}
	a.stored = true
	a.segno, a.segFirst = meta.ActiveSegno, meta.ActiveFirstSeq
	a.headHash = segment.GenesisHash(id)
	if meta.Damage != "" {
		a.damage = storedDamage(id, meta.Damage)
	}

	last, ok, err := db.lastSeqEntry(id)
	if err != nil {
		return nil, err
	}
	if ok {
		a.head = last.seq
		a.headHash = last.Hash
		a.lastCounter = last.Counter
		if last.Segno == a.segno {
			a.segSize = last.Offset + int64(last.Size)
			a.segCount = last.seq - a.segFirst + 1
		} else if last.Segno+1 != a.segno || last.seq+1 != a.segFirst {
			return nil, errs.New(errs.CodeIndexMismatch, "anchor %q: active segment %d starts at seq %d but the last record (seq %d) is in segment %d",
				id, a.segno, a.segFirst, last.seq, last.Segno)
		}
	}
	if a.segno != 0 {
		prev := segment.GenesisHash(id)
		if a.segFirst > 1 {
			e, ok, err := db.location(id, a.segFirst-1)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, errs.New(errs.CodeIndexMismatch, "anchor %q: no index row for seq %d before active segment %d", id, a.segFirst-1, a.segno)
			}
			prev = e.Hash
		}
		h := segment.Header{Anchor: id, Segno: a.segno, FirstSeq: a.segFirst, PrevHash: prev}
		segment.AppendHeader(nil, &h)
		a.segHeader = h.Checksum
	}
	tree, err := treestore.Load(context.Background(), db.index, id, a.head)
	if err != nil {
		return nil, err
	}
	a.publish(a.anchorHead, tree)
	return a, nil
}

type seqRow struct {
	seq uint64
	schema.Location
}

// lastSeqEntry returns the anchor's highest 's' row.
func (db *DB) lastSeqEntry(id string) (seqRow, bool, error) {
	prefix := schema.AnchorPrefix(schema.TagSeq, id)
	it, err := db.index.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: schema.PrefixEnd(prefix)})
	if err != nil {
		return seqRow{}, false, errs.Wrap(errs.CodeWriteFailed, err, "index iterator")
	}
	defer it.Close()
	if !it.Last() {
		return seqRow{}, false, ioErr(it.Error(), "read index")
	}
	return decodeSeqRow(prefix, it.Key(), it.Value())
}

func decodeSeqRow(prefix, k, v []byte) (seqRow, bool, error) {
	seq, ok := schema.SeqOf(len(prefix), k)
	if !ok {
		return seqRow{}, false, errs.New(errs.CodeIndexMismatch, "malformed seq key %x", k)
	}
	e, err := schema.DecodeLocation(v)
	if err != nil {
		return seqRow{}, false, errs.Wrap(errs.CodeIndexMismatch, err, "seq key %x", k)
	}
	return seqRow{seq: seq, Location: e}, true, nil
}

// location returns where record seq of the anchor lives.
func (db *DB) location(id string, seq uint64) (schema.Location, bool, error) {
	v, closer, err := db.index.Get(schema.SeqKey(id, seq))
	if errors.Is(err, pebble.ErrNotFound) {
		return schema.Location{}, false, nil
	}
	if err != nil {
		return schema.Location{}, false, errs.Wrap(errs.CodeWriteFailed, err, "read index")
	}
	defer closer.Close()
	e, err := schema.DecodeLocation(v)
	if err != nil {
		return e, false, errs.Wrap(errs.CodeIndexMismatch, err, "anchor %q seq %d", id, seq)
	}
	return e, true, nil
}

// segmentPath is the file of segment segno of the anchor.
func (db *DB) segmentPath(a *anchor, segno uint64) string {
	return db.fs.PathJoin(a.dir, segment.FileName(segno))
}

func (a *anchor) String() string { return fmt.Sprintf("anchor %q", a.id) }
