package engine

import (
	"fmt"

	"github.com/anchordb/anchordb/engine/internal/treestore"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/invariants"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/transparency-dev/merkle/compact"
)

// The applier's side of a commit group: staging its segment bytes and
// Merkle nodes, one merged Pebble batch per round, and publishing the
// anchors' visible heads. It runs in journal order (commit.go).

// applyGroups applies consecutive groups in journal order, after their
// journal blocks are durable (or at once for NoSync): it buffers the segment
// bytes and applies the index batches, merged into one: one trip through
// Pebble's commit pipeline for all of them. The commit pipeline then makes
// the groups visible (commit.go).
func (db *DB) applyGroups(groups []*group) {
	defer func() {
		for _, g := range groups {
			db.forgetPendingIdem(g)
			_ = g.batch.Close()
		}
	}()
	var merged *pebble.Batch
	for _, g := range groups {
		if !db.stageGroup(g) {
			continue
		}
		switch {
		case g.batch.Empty():
		case merged == nil:
			merged = g.batch
		default:
			if merged != db.mergeBatch {
				// Copied into a batch kept from round to round: growing the
				// first group's batch reallocated it several times a round.
				if db.mergeBatch == nil {
					db.mergeBatch = db.index.NewBatch(pebble.WithMaxRetainedSizeBytes(mergeBatchRetained))
				}
				_ = db.mergeBatch.Apply(merged, nil)
				merged = db.mergeBatch
			}
			_ = merged.Apply(g.batch, nil)
		}
	}
	if merged != nil && merged == db.mergeBatch {
		// Reset keeps the buffer up to mergeBatchRetained. Pebble clears
		// the data of a batch it keeps as a memtable of its own (past half
		// the memtable), so this one is never reset under it.
		defer merged.Reset()
	}
	if merged != nil {
		// Raised before the rows reach the memtable: a flush that starts
		// the moment they do must already sync their journal blocks.
		db.indexedUpTo.Lock()
		for _, g := range groups {
			if g.err == nil && db.indexedUpTo.pos.Less(g.end) {
				db.indexedUpTo.pos = g.end
			}
		}
		db.indexedUpTo.Unlock()
		if err := db.applyBatch(merged); err != nil {
			err = db.fail(err)
			for _, g := range groups {
				if g.err == nil {
					g.err = err
				}
			}
			return
		}
	}
	for _, g := range groups {
		if g.err == nil {
			g.publish()
		}
	}
	if invariants.Enabled {
		db.checkAppliedGroups(groups)
	}
}

// mergeBatchRetained bounds the buffer the applier keeps for merging the
// index batches of the groups it applies together.
const mergeBatchRetained = 4 << 20

// stageGroup does a group's work before its index batch is applied. It
// reports whether the group is still good.
func (db *DB) stageGroup(g *group) bool {
	if g.err == nil {
		if f := db.failed.Load(); f != nil {
			g.err = f
		}
	}
	if g.err != nil {
		return false
	}
	db.raiseStaged(g)
	if err := g.bufferSegments(); err != nil {
		g.err = db.fail(err)
		return false
	}
	g.extendTrees()
	for _, m := range g.marks {
		if err := db.captureSettle(m); err != nil {
			g.err = db.fail(err)
			return false
		}
	}
	return true
}

func (db *DB) forgetPendingIdem(g *group) {
	if len(g.idem) == 0 {
		return
	}
	db.idemMu.Lock()
	for k := range g.idem {
		delete(db.pendingIdem, k)
	}
	db.idemMu.Unlock()
}

// applyBatch applies b to the index (which has no WAL of its own: the
// journal is its log). Pebble treats a failed commit as fatal; its logger
// turns that into a panic we recover here as IO_001.
func (db *DB) applyBatch(b *pebble.Batch) (err error) {
	defer func() {
		if r := recover(); r != nil {
			pf, ok := r.(pebbleFatal)
			if !ok {
				panic(r)
			}
			err = errs.New(errs.CodeWriteFailed, "index: %s", string(pf))
		}
	}()
	if err = db.index.Apply(b, pebble.NoSync); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "index apply")
	}
	return nil
}

// extendTrees runs in the applier, in journal order: it extends each
// anchor's Merkle compact range by the group's records and puts the tree
// nodes that must be stored into the group's batch. The tree is index
// data, derived from hashes the leader already chained, so it is built
// behind the acknowledgement rather than on the leader's path: two of the
// three BLAKE3 computations per record left the leader.
func (g *group) extendTrees() {
	for _, p := range g.order {
		if len(p.leaves) == 0 {
			continue
		}
		p.tree = cloneRange(p.a)
		visit := treestore.Visitor(g.batch, p.a.id)
		for _, h := range p.leaves {
			leaf := segment.LeafHash(h)
			_ = p.tree.Append(leaf[:], visit)
		}
		p.a.tree = p.tree
	}
}

// cloneRange copies the applier's compact range of a: ranges are extended
// in place, and the one a group starts from may still be the visible one.
func cloneRange(a *anchor) *compact.Range {
	hs := append([][]byte(nil), a.tree.Hashes()...)
	r, err := merkleFactory.NewRange(a.tree.Begin(), a.tree.End(), hs)
	if err != nil {
		panic(fmt.Sprintf("anchordb: cloning a valid compact range failed: %v", err))
	}
	return r
}

// publish makes the group's anchors' heads visible to readers.
func (g *group) publish() {
	for _, p := range g.order {
		a := p.a
		a.mu.Lock()
		a.vis = p.anchorHead
		if p.tree != nil {
			a.visTree = p.tree
		}
		a.mu.Unlock()
	}
}
