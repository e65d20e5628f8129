package engine

import (
	"bytes"
	"errors"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
)

// Compaction with raw_log "truncate" removes sealed segments below a cut and
// leaves a stub of each: the hashes of its records, its first seq, what it
// links to and its last counter (segment/stub.go). The records are gone, so
// a stub is checked for what it still carries: its checksum, that it
// continues the chain where the segment would have, that the index's rows
// for its records say "truncated" (size 0) with the same hashes, and that
// its hashes give the tree the index and the in-memory range have. The rows
// a stub itself implies (stubRows in compact.go) are checked too: the 'i'
// row of each idempotency key it keeps (exactly; checkIdemRows also refuses
// any other 'i' row naming a truncated seq), and the 'r' row of each record
// it kept, with its 'k' row unless a rebuild from a snapshot left that
// version out. Kept 'k' rows that are there are checkRetained's.

// truncRange is a run of truncated seqs.
type truncRange struct{ lo, hi uint64 }

// truncated reports whether seq belongs to a stub.
func (c *anchorCheck) truncated(seq uint64) bool {
	for _, r := range c.truncs {
		if seq >= r.lo && seq <= r.hi {
			return true
		}
	}
	return false
}

// scanStub checks one stub in place of its segment.
func (c *anchorCheck) scanStub(s segInfo, _ bool) error {
	data, err := readWholeFile(c.v.db.fs, s.path)
	if err != nil {
		if oserrorIsNotExist(err) {
			c.report(errs.CodeChainBroken, c.next, s.path, 0, "segment stub %s disappeared", s.path)
			return nil
		}
		if e := foreignOf(err); e != nil {
			c.report(errs.CodeChainBroken, c.next, s.path, 0, "segment stub %s", e.Message)
			return nil
		}
		return errs.Wrap(errs.CodeWriteFailed, err, "read %s", s.path)
	}
	c.v.bytes.Add(int64(len(data)))
	st, err := segment.ParseStub(data)
	if err == nil && (st.Anchor != c.id || st.Segno != s.segno) {
		err = errs.New(errs.CodeChainBroken, "the stub names anchor %q segment %d", st.Anchor, st.Segno)
	}
	if err != nil {
		code := errs.CodeOf(err)
		if code == "" {
			code = errs.CodeHashMismatch
		}
		c.report(code, c.next, s.path, 0, "segment stub: %s", errs.Message(err))
		c.skipRows(func(e schema.Location) bool { return e.Segno == s.segno })
		return nil
	}
	first := st.FirstSeq
	if c.resume {
		// An incremental pass that starts inside a truncated segment: skip
		// the hashes the trusted checkpoint covers.
		c.resume, c.resumeOff = false, 0
		first = c.next
		if first < st.FirstSeq || first > st.LastSeq()+1 {
			c.report(errs.CodeChainBroken, c.next, s.path, 0, "segment stub of seqs %d..%d cannot continue at seq %d", st.FirstSeq, st.LastSeq(), c.next)
			return nil
		}
		if first > st.FirstSeq && st.Hashes[first-st.FirstSeq-1] != c.prev {
			c.report(errs.CodeChainBroken, c.next, s.path, 0, "segment stub does not hold the trusted record's hash at seq %d", first-1)
		}
	} else if st.FirstSeq != c.next || st.PrevHash != c.prev {
		c.report(errs.CodeChainBroken, c.next, s.path, 0, "segment stub (first seq %d, prev hash %s) does not continue the chain at seq %d (%s)",
			st.FirstSeq, st.PrevHash, c.next, c.prev)
		c.skipRows(func(e schema.Location) bool { return e.Segno < s.segno })
		c.next, c.prev = st.FirstSeq, st.PrevHash
	}
	c.truncs = append(c.truncs, truncRange{lo: first, hi: st.LastSeq()})
	if first == st.FirstSeq {
		c.noteHistStub(&st)
	}
	if err := c.expectStubRows(&st, s.path, first); err != nil {
		return err
	}
	for seq := first; seq <= st.LastSeq(); seq++ {
		h, counter := st.Hashes[seq-st.FirstSeq], st.Counters[seq-st.FirstSeq]
		raw, ok := c.rows.take(seq)
		switch {
		case !ok:
			c.report(errs.CodeIndexMismatch, seq, s.path, 0, "no 's' row for truncated seq %d", seq)
		default:
			row, err := schema.DecodeLocation(raw)
			switch {
			case err != nil:
				c.report(errs.CodeIndexMismatch, seq, s.path, 0, "'s' row of seq %d is malformed: %s", seq, errs.Message(err))
			case row.Segno != s.segno || row.Size != 0 || row.Hash != h:
				c.report(errs.CodeIndexMismatch, seq, s.path, 0, "'s' row of truncated seq %d says segment %d size %d hash %s; the stub says segment %d, truncated, hash %s",
					seq, row.Segno, row.Size, row.Hash, s.segno, h)
			case row.Counter != counter:
				// The stub is what is left of the log: its counters are
				// the records' (ParseStub checked they increase).
				c.report(errs.CodeIndexMismatch, seq, s.path, 0, "'s' row of truncated seq %d says counter %d; the stub says %d", seq, row.Counter, counter)
			}
		}
		if counter <= c.lastCt && seq > 1 {
			c.report(errs.CodeChainBroken, seq, s.path, 0, "truncated seq %d has counter %d, not above the previous record's %d", seq, counter, c.lastCt)
		}
		c.leaf(seq, h, counter, 0)
		c.lastCt = counter
		c.next, c.prev = seq+1, h
	}
	return nil
}

// expectStubRows checks the index rows a stub implies for its seqs from
// first on: its idempotency keys' 'i' rows (looked up now in an incremental
// check, else left to checkIdemRows, which also sees the rows that should
// not be there) and its kept records' 'r' and 'k' rows.
func (c *anchorCheck) expectStubRows(st *segment.Stub, path string, first uint64) error {
	for _, e := range st.Idem {
		if e.Seq < first {
			continue
		}
		ie := schema.Idem{Seq: e.Seq, Counter: e.Counter, Hash: st.HashAt(e.Seq), Fingerprint: e.Fingerprint}
		k, w := schema.IdemKey(c.id, e.Key), ie.Append(nil)
		if !c.exactRows {
			if c.stubIdem == nil {
				c.stubIdem = make(map[string]expectedRow)
			}
			c.stubIdem[string(k)] = expectedRow{value: w, seq: e.Seq, path: path, tag: schema.TagIdem}
			continue
		}
		got, ok, err := c.snapRow(k)
		switch {
		case err != nil:
			return err
		case !ok:
			c.report(errs.CodeIndexMismatch, e.Seq, path, 0, "the index has no 'i' row for the idempotency key %q of truncated seq %d", e.Key, e.Seq)
		case !bytes.Equal(got, w):
			c.report(errs.CodeIndexMismatch, e.Seq, path, 0, "'i' row of truncated seq %d says %x; the stub implies %x", e.Seq, got, w)
		}
	}
	for i := range st.Kept {
		rec := &st.Kept[i]
		if rec.Seq < first {
			continue
		}
		got, ok, err := c.snapRow(schema.KeptKey(c.id, rec.Seq))
		switch {
		case err != nil:
			return err
		case !ok:
			c.report(errs.CodeIndexMismatch, rec.Seq, path, 0, "the index has no 'r' row for truncated seq %d, which the stub kept", rec.Seq)
		case !bytes.Equal(got, segment.AppendFrame(nil, rec)):
			c.report(errs.CodeIndexMismatch, rec.Seq, path, 0, "the 'r' row of truncated seq %d is not the record the stub kept", rec.Seq)
		}
		// NB: a rebuild from a snapshot indexes the state at its frontier,
		// not the versions it superseded: below it a kept version may lack
		// its 'k' row.
		if !rec.IsKV() || rec.Seq <= c.v.histFrom[c.id] {
			continue
		}
		if _, ok, err := c.snapRow(schema.VersionKey(rec.Key, rec.Counter, c.id)); err != nil {
			return err
		} else if !ok {
			c.report(errs.CodeIndexMismatch, rec.Seq, path, 0, "the index has no 'k' row for truncated seq %d, the version of key %q the stub kept", rec.Seq, rec.Key)
		}
	}
	return nil
}

// snapRow reads a row from the snapshot (a copy).
func (c *anchorCheck) snapRow(k []byte) ([]byte, bool, error) {
	v, closer, err := c.v.snap.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, errs.Wrap(errs.CodeWriteFailed, err, "read index")
	}
	defer closer.Close()
	return bytes.Clone(v), true, nil
}
