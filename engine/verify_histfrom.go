package engine

import (
	"bytes"
	"fmt"
	"maps"
	"slices"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/engine/internal/scratch"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
)

// A rebuild from a snapshot (fastrebuild.go) indexes, for the records up to
// the snapshot's frontier, only the state there and every delete, and
// records that frontier in the mhistory_from row. The row-by-row check
// leaves 'k' rows at or below that frontier out (expectRows), and
// checkDeferred and checkRetained check the rows that are there against
// their records; this file checks that they are exactly the rows such a
// rebuild, and the truncations that may have followed it, leave:
//
//   - for each key, its last version in merged order (counter, then anchor
//     id bytes) among the records inside the frontier — put or delete —
//     has its row;
//   - every delete inside the frontier has its row (the rebuild writes them
//     all: a snapshot holds none);
//   - no other version inside the frontier has one;
//   - no row there is located (segment, offset, size): the rebuild writes
//     deferred rows (segno 0) and truncation rewrites them as kept rows
//     (size 0), nothing writes a located one;
//   - the frontier names only anchors the index knows, at seqs they hold.
//
// Truncation removes records, and with them rows: of a segment it removes,
// it keeps each key's last version in the segment (as a kept row, when the
// version had a row) and drops the rows of the others. A key's version
// inside the frontier that a truncation dropped is not known any more; it
// is never the key's last inside the frontier unless the segment's last
// version of the key lies beyond the frontier — the segment straddles it.
// Such a key is marked uncertain: its last known version may then lack its
// row. Every other rule holds for it.
//
// How the state is computed. The anchor checks already read every record
// (and every stub) in order; each one inside the frontier is written, as
// (versionKey → type, seq), to a scratch Pebble store beside the index, the
// way VerifySnapshot's replay keeps its state. Version keys sort a key's
// versions newest first in merged order, so the store lists, per key, the
// version the state holds first: one merge of the store with the index's
// 'k' rows, both in key order, checks every rule. Memory stays bounded by
// the batches in flight, whatever the size of the database, and no record
// is read twice. A proved snapshot at exactly that frontier would give the
// state more cheaply, but compaction deletes snapshots by policy and a
// forged frontier has none: the log is the one source that is always there.
//
// A database without mhistory_from (every one not rebuilt from a snapshot)
// opens no store and pays nothing. Neither does a check that does not read
// every record inside the frontier (VerifyOptions.Anchors, or From with a
// checkpoint past the start of an anchor the frontier names): without them
// the state is not known, and that check only ever looked at rows that are
// there.

// histCheck is the scratch store of one Verify run's history check.
type histCheck struct {
	store *scratch.Store
}

// The values of the scratch store: a version's type, seq and whether its
// record is truncated; a key prefix alone marks the key uncertain.
const histValueSize = 1 + 8 + 1

// openHistCheck opens the scratch store when the index has mhistory_from
// and this run reads every record inside it.
func (v *verifier) openHistCheck() error {
	if len(v.histFrom) == 0 || v.restricted {
		return nil
	}
	if v.opts.From != nil {
		for _, e := range v.opts.From.Entries {
			if e.Size > 0 && v.histFrom[e.Anchor] > 0 {
				return nil
			}
		}
	}
	store, err := v.db.openScratch("verify")
	if err != nil {
		return err
	}
	v.hist = &histCheck{store: store}
	return nil
}

func (h *histCheck) close() { h.store.Close() }

// histBatch returns the anchor's batch into the scratch store, or nil when
// there is no history check.
func (c *anchorCheck) histBatch() *pebble.Batch {
	if c.v.hist == nil {
		return nil
	}
	if c.hb == nil {
		c.hb = c.v.hist.store.NewBatch()
	}
	return c.hb
}

// noteHistRecord notes a record (or a stub's seq, rec then holding no
// more than its seq) at or below the frontier: it counts it, and writes
// the version of a put or delete.
func (c *anchorCheck) noteHistRecord(rec *segment.Record, truncated bool) {
	b := c.histBatch()
	if b == nil || rec.Seq > c.v.histFrom[c.id] {
		return
	}
	c.histSeen++
	if rec.IsKV() {
		c.noteHistVersion(rec, truncated)
	}
}

// noteHistVersion writes one version inside the frontier to the store.
func (c *anchorCheck) noteHistVersion(rec *segment.Record, truncated bool) {
	b := c.histBatch()
	var val [histValueSize]byte
	val[0] = schema.VersionPut
	if rec.Type == segment.TypeDelete {
		val[0] = schema.VersionDelete
	}
	be.PutUint64(val[1:], rec.Seq)
	if truncated {
		val[9] = 1
	}
	c.scratch = schema.AppendVersionKey(c.scratch[:0], rec.Key, rec.Counter, c.id)
	_ = b.Set(c.scratch, val[:], nil)
	c.flushHist(false)
}

// noteHistStub notes what a stub tells of the records inside the frontier:
// each seq, the versions it kept there, and — when the stub straddles the
// frontier — the keys whose version inside it may have been dropped.
func (c *anchorCheck) noteHistStub(st *segment.Stub) {
	if c.histBatch() == nil {
		return
	}
	hf := c.v.histFrom[c.id]
	for seq := st.FirstSeq; seq <= st.LastSeq() && seq <= hf; seq++ {
		c.histSeen++
	}
	for i := range st.Kept {
		rec := &st.Kept[i]
		switch {
		case !rec.IsKV():
		case rec.Seq <= hf:
			c.noteHistVersion(rec, true)
		case st.FirstSeq <= hf:
			// The stub's last version of the key is past the frontier;
			// one inside it, if any, went with the segment.
			c.scratch = schema.AppendKeyPrefix(c.scratch[:0], rec.Key)
			_ = c.hb.Set(c.scratch, nil, nil)
		}
	}
	c.flushHist(false)
}

// flushHist commits the anchor's batch when it is large, or when final.
func (c *anchorCheck) flushHist(final bool) {
	if c.hb == nil || (!final && c.hb.Len() < 1<<20) {
		return
	}
	if err := c.hb.Commit(pebble.NoSync); err != nil {
		c.v.fail(errs.Wrap(errs.CodeWriteFailed, err, "verify store"))
	}
	c.hb.Reset()
}

// checkHistoryFrom checks the mhistory_from row's frontier against the
// anchors, and the 'k' rows below it against the state there.
func (v *verifier) checkHistoryFrom() {
	covered := v.hist != nil
	for _, id := range slices.Sorted(maps.Keys(v.histFrom)) {
		seq := v.histFrom[id]
		if !v.known[id] {
			v.report(Finding{Code: errs.CodeIndexMismatch, Anchor: id, Seq: seq, Message: fmt.Sprintf(
				"the %s row names anchor %q, which the index does not know", schema.MetaHistoryFrom, id)})
			covered = false
			continue
		}
		c := v.byID[id]
		if c == nil || !c.complete {
			covered = false
			continue
		}
		if seq > c.last {
			c.report(errs.CodeIndexMismatch, seq, "", 0, "the %s row names seq %d, beyond its head (seq %d)", schema.MetaHistoryFrom, seq, c.last)
			covered = false
			continue
		}
		if c.start != 1 || c.histSeen != seq {
			// Records inside the frontier were not read (findings say
			// why, or an incremental check skipped them).
			covered = false
		}
	}
	v.mu.Lock()
	failed := v.ioErr != nil // a batch of the store may be missing
	v.mu.Unlock()
	if !covered || failed || v.halted() {
		return
	}
	if err := v.compareHistory(); err != nil {
		v.fail(err)
	}
}

// compareHistory merges the store's versions with the index's 'k' rows
// below the frontier, key by key, newest first.
func (v *verifier) compareHistory() error {
	xi, err := v.hist.store.NewIter(nil)
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "verify store")
	}
	defer xi.Close()
	yi, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: []byte{schema.TagKey}, UpperBound: []byte{schema.TagKey + 1}})
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "index iterator")
	}
	defer yi.Close()
	var anchor []byte
	// below moves yi to the next row of a version inside the frontier.
	below := func(ok bool) bool {
		for ; ok; ok = yi.Next() {
			var good bool
			if anchor, good = schema.VersionKeyAnchor(anchor[:0], yi.Key()); !good {
				continue // keyRowPass reports it
			}
			hf, in := v.histFrom[string(anchor)]
			if !in {
				continue
			}
			if ve, err := schema.DecodeVersion(yi.Value()); err == nil && ve.Seq <= hf {
				return true
			}
		}
		return false
	}
	xok, yok := xi.First(), below(yi.First())
	var group, kbuf, abuf []byte
	stateSeen, uncertain := false, false
	n := 0
	for xok || yok {
		if n++; n%4096 == 0 && v.halted() {
			return nil
		}
		cmp := 0
		switch {
		case !yok:
			cmp = -1
		case !xok:
			cmp = 1
		default:
			cmp = bytes.Compare(xi.Key(), yi.Key())
		}
		k := yi.Key()
		if cmp < 0 {
			k = xi.Key()
		}
		p, ok := schema.VersionKeyPrefixLen(k)
		if !ok {
			// Not a version key: a malformed index row (keyRowPass
			// reports it), never one of the store's.
			yok = below(yi.Next())
			continue
		}
		if !bytes.Equal(k[:p], group) {
			group = append(group[:0], k[:p]...)
			stateSeen, uncertain = false, false
		}
		if cmp < 0 && len(k) == p {
			uncertain = true
			xok = xi.Next()
			continue
		}
		var counter uint64
		var err error
		if kbuf, abuf, counter, err = schema.AppendVersionKeyParts(kbuf[:0], abuf[:0], k); err != nil {
			yok = below(yi.Next())
			continue
		}
		key, c := kbuf, v.byID[string(abuf)]
		switch {
		case cmp < 0:
			typ, seq, truncated := decodeHistValue(xi.Value())
			switch {
			case typ == schema.VersionDelete:
				c.reportHist(seq, truncated, "the index has no 'k' row for the delete of key %q at seq %d (counter %d), below the rebuilt frontier: a rebuild from a snapshot indexes every delete up to it",
					key, seq, counter)
			case !stateSeen && !uncertain:
				c.reportHist(seq, truncated, "the index has no 'k' row for key %q at the rebuilt frontier: its last version there is seq %d (counter %d)",
					key, seq, counter)
			}
			stateSeen = true
			xok = xi.Next()
		case cmp > 0:
			ve, _ := schema.DecodeVersion(yi.Value())
			c.reportHist(ve.Seq, false, "'k' row %x of key %q names seq %d below the rebuilt frontier, which is no put or delete of that key and counter",
				k, key, ve.Seq)
			yok = below(yi.Next())
		default:
			typ, seq, truncated := decodeHistValue(xi.Value())
			if typ == schema.VersionPut && stateSeen {
				c.reportHist(seq, truncated, "'k' row of key %q seq %d (counter %d) below the rebuilt frontier: a later version inside it supersedes it, and a rebuild from a snapshot indexes only the state there",
					key, seq, counter)
			}
			if schema.KindOf(yi.Value()) == schema.Located {
				c.reportHist(seq, truncated, "'k' row of key %q seq %d below the rebuilt frontier says where its record is: a rebuild from a snapshot writes no such row there",
					key, seq)
			}
			stateSeen = true
			xok, yok = xi.Next(), below(yi.Next())
		}
	}
	if err := xi.Error(); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "verify store")
	}
	if err := yi.Error(); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "index iterator")
	}
	return nil
}

func decodeHistValue(b []byte) (typ byte, seq uint64, truncated bool) {
	if len(b) != histValueSize {
		return 0, 0, false
	}
	return b[0], be.Uint64(b[1:]), b[9] == 1
}

// reportHist reports a finding of the history check at seq, naming the
// segment that holds the record when it is in one.
func (c *anchorCheck) reportHist(seq uint64, truncated bool, format string, args ...any) {
	path, off := "", int64(0)
	if !truncated {
		if e, ok, err := c.rowAt(seq); err == nil && ok && e.Size > 0 {
			path, off = c.segPath(e.Segno), e.Offset
		}
	}
	c.report(errs.CodeIndexMismatch, seq, path, off, format, args...)
}
