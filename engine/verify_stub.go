package engine

import (
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
)

// Compaction with raw_log "truncate" removes sealed segments below a cut and
// leaves a stub of each: the hashes of its records, its first seq, what it
// links to and its last counter (segment/stub.go). The records are gone, so
// a stub is checked for what it still carries: its checksum, that it
// continues the chain where the segment would have, that the index's rows
// for its records say "truncated" (size 0) with the same hashes, and that
// its hashes give the tree the index and the in-memory range have. Rows a
// truncated record implied are left to rowsOfTruncated in verify_rows.go.

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
		c.report(code, c.next, s.path, 0, "segment stub: %v", err)
		c.skipRows(func(e seqEntry) bool { return e.Segno == s.segno })
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
		c.skipRows(func(e seqEntry) bool { return e.Segno < s.segno })
		c.next, c.prev = st.FirstSeq, st.PrevHash
	}
	c.truncs = append(c.truncs, truncRange{lo: first, hi: st.LastSeq()})
	for seq := first; seq <= st.LastSeq(); seq++ {
		h, counter := st.Hashes[seq-st.FirstSeq], st.Counters[seq-st.FirstSeq]
		raw, ok := c.rows.take(seq)
		switch {
		case !ok:
			c.report(errs.CodeIndexMismatch, seq, s.path, 0, "no 's' row for truncated seq %d", seq)
		default:
			row, err := decodeSeqEntry(raw)
			switch {
			case err != nil:
				c.report(errs.CodeIndexMismatch, seq, s.path, 0, "'s' row of seq %d is malformed: %v", seq, err)
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
