package engine

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2"
)

// Damage found after Open. A clean Open reads no segment, so a byte
// changed in the middle of a log while the database was closed is first
// seen by a read of that record or by Verify. SPEC §3 makes the anchor
// read-only from then on, until an operator acts (docs/RELIABILITY.md:
// restore the files, then rebuild-index, which checks every record again).
//
// Marking happens in two steps. noteDamage sets the anchor's damage at once
// (the leader checks it before every record it places, so no later append
// gets in) and queues the anchor; the leader writes the damage into the
// anchor's 'a' row in its next group (stageDamage). The 'a' row is the
// leader's to write: a reader writing it directly could put back an older
// active segment over one a concurrent seal had just recorded. A settle is
// requested so that the row reaches disk soon even when no append follows;
// Close settles too, and itself writes the marks found while it waited for
// the reads in progress (recordLateDamage). A crash before then loses the
// mark, not data: the next read or Verify finds the same damage and marks
// it again.

// damageQueue holds anchors whose damage the leader has yet to record.
type damageQueue struct {
	pending atomic.Bool // anchors is not empty: the leader's path stays lock-free
	mu      sync.Mutex
	anchors []*anchor
}

// noteDamage makes the anchor of a read or Verify finding read-only. Only
// findings about the log itself count (INT_001, INT_002): an index that
// disagrees with the segments (INT_004) is a projection to rebuild, and an
// I/O error says nothing about the bytes.
func (db *DB) noteDamage(id string, e *errs.Error) {
	if db.ro != nil {
		return // a read-only open records nothing: the next check finds it again
	}
	if e == nil || (e.Code != errs.CodeHashMismatch && e.Code != errs.CodeChainBroken) {
		return
	}
	a, err := db.getAnchor(id, false)
	if err != nil || a == nil {
		return
	}
	if e.Anchor == "" {
		e = e.At(id, e.Seq, e.File, e.Offset)
	}
	a.mu.Lock()
	first := a.damage == nil
	if first {
		a.damage = e
	}
	a.mu.Unlock()
	if !first {
		return
	}
	db.opts.Logger.Errorf("anchor %q is read-only from now on: %v", id, e)
	db.damaged.mu.Lock()
	db.damaged.anchors = append(db.damaged.anchors, a)
	db.damaged.pending.Store(true)
	db.damaged.mu.Unlock()
	select {
	case db.settleCh <- struct{}{}:
	default:
	}
}

// stageDamage runs in the leader, in buildGroup: every anchor noteDamage
// queued gets its 'a' row rewritten in this group, with the damage in it.
func (g *group) stageDamage() {
	anchors := g.db.damaged.take()
	for _, a := range anchors {
		g.pendingFor(a).metaDirty = true
	}
	if len(anchors) > 0 {
		_ = g.batch.Set(schema.MetaKey(schema.MetaDamaged), schema.DamagedFlag, nil)
	}
}

// take empties the queue and returns what it held.
func (q *damageQueue) take() []*anchor {
	if !q.pending.Load() {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	anchors := q.anchors
	q.anchors = nil
	q.pending.Store(false)
	return anchors
}

// recordLateDamage writes, at Close, the marks of damage that reads and
// Verify calls Close waited for found after its last settle. Close waits
// for them once the leader and the applier have stopped, so no group writes
// these rows (TestDamageFoundWhileClosingIsKept); with none running, the
// anchor's head is final, and the rows are written and flushed here, as
// markDamaged writes one at Open.
func (db *DB) recordLateDamage() error {
	anchors := db.damaged.take()
	if len(anchors) == 0 {
		return nil
	}
	b := db.index.NewBatch()
	defer b.Close()
	for _, a := range anchors {
		setDamageRows(b, a, a.anchorHead)
	}
	if err := db.applyBatch(b); err != nil {
		return err
	}
	return db.flushIndex()
}

// setDamageRows puts into b the anchor's 'a' row at head, its damage in it,
// and the schema.MetaDamaged row. Only where no leader runs (Open, the end of
// Close): after Open the 'a' row is the leader's (stageDamage).
func setDamageRows(b *pebble.Batch, a *anchor, head anchorHead) {
	meta := anchorMetaOf(a, head)
	_ = b.Set(schema.AnchorKey(a.id), meta.Append(nil), nil)
	_ = b.Set(schema.MetaKey(schema.MetaDamaged), schema.DamagedFlag, nil)
}

// reportStoredDamage names, as Open's recovery events, the anchors an
// earlier session found damaged: their 'a' rows keep the damage, and SPEC
// §3 has Open report it until an operator acts. The rows are scanned only
// when the schema.MetaDamaged row says some anchor has damage.
func (db *DB) reportStoredDamage() error {
	_, closer, err := db.index.Get(schema.MetaKey(schema.MetaDamaged))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "read damage mark")
	}
	closer.Close()
	reported := map[string]bool{}
	for _, ev := range db.recovery.Events {
		if ev.Kind == EventDamaged {
			reported[ev.Anchor] = true
		}
	}
	it, err := db.index.NewIter(&pebble.IterOptions{LowerBound: []byte{schema.TagAnchor}, UpperBound: []byte{schema.TagAnchor + 1}})
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "index iterator")
	}
	for ok := it.First(); ok; ok = it.Next() {
		id := string(it.Key()[1:])
		if reported[id] {
			continue
		}
		meta, err := schema.DecodeAnchorMeta(it.Value())
		if err != nil {
			_ = it.Close()
			return errs.Wrap(errs.CodeIndexMismatch, err, "anchor %q", id)
		}
		if meta.Damage == "" {
			continue
		}
		e := storedDamage(id, meta.Damage)
		db.event(RecoveryEvent{Kind: EventDamaged, Anchor: id, Err: e})
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "read anchors")
	}
	return nil
}

// anchorMetaOf is the anchor's 'a' row at head: its active segment, and its
// damage when it has any, so that no rewrite of the row (a seal, a stage of
// damage) drops a mark already made.
func anchorMetaOf(a *anchor, head anchorHead) schema.AnchorMeta {
	meta := schema.AnchorMeta{ActiveSegno: head.segno, ActiveFirstSeq: head.segFirst}
	if d := a.damaged(); d != nil {
		meta.Damage = d.Error()
		if meta.ActiveSegno == 0 {
			// No record yet: the row names the segment the first would
			// open.
			meta.ActiveSegno, meta.ActiveFirstSeq = 1, 1
		}
	}
	return meta
}

// storedDamage is the error an 'a' row's damage text stands for. The text is
// the finding as Error() wrote it, so its first word is the finding's code.
func storedDamage(id, text string) *errs.Error {
	code := errs.CodeChainBroken
	if first, _, ok := strings.Cut(text, " "); ok {
		switch c := errs.Code(first); c {
		case errs.CodeHashMismatch, errs.CodeChainBroken, errs.CodeIndexMismatch:
			code = c
		}
	}
	e := errs.New(code, "anchor %q is read-only: %s", id, text)
	e.Anchor = id
	return e
}
