package engine

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/engine/internal/scratch"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
)

// The index rows a record implies are whatever schema.RecordRows writes for it —
// the one definition shared by commits, recovery and rebuilds. Verification
// runs schema.RecordRows into a scratch batch for every record it reads and
// compares what comes out with the snapshot:
//
//   - 's' rows, which are in seq order like the records, one by one;
//   - 'k' rows (ordered by user key) and 'i' rows (by idempotency key) as
//     multisets: the sum of a keyed hash of every expected row against the
//     sum over the rows found, per anchor, with the row count. The hash is
//     hash/maphash with a seed drawn for each run, so the rows of a damaged
//     index cannot be arranged to cancel out. Only when the sums differ are
//     the anchor's rows matched one by one, to name each bad row;
//   - any other row, in case schema.RecordRows learns a new kind, by a lookup.
//
// An incremental check (VerifyOptions.From) sees only part of an anchor's
// records, so it looks every expected row up instead, and does not look for
// rows that should not be there.

// digestSeeds key the row hashes of one run.
type digestSeeds struct{ seed maphash.Seed }

func newDigestSeeds() digestSeeds { return digestSeeds{seed: maphash.MakeSeed()} }

// rowDigest is an order-independent digest of a multiset of index rows: the
// number of rows and the sum of their keyed hashes.
type rowDigest struct{ n, sum uint64 }

// add adds the row (k, v); buf is the caller's scratch space.
func (d *rowDigest) add(s *digestSeeds, buf *[]byte, k, v []byte) {
	b := be.AppendUint32((*buf)[:0], uint32(len(k)))
	b = append(b, k...)
	b = append(b, v...)
	*buf = b
	d.n++
	d.sum += maphash.Bytes(s.seed, b)
}

// expectRows derives the index rows of a record just read at (segment,
// offset, size) and checks or digests them.
func (c *anchorCheck) expectRows(rec *segment.Record, offset int64, size int) error {
	db := c.v.db
	if c.batch == nil {
		c.batch = db.index.NewBatch()
	}
	c.batch.Reset()
	c.scratch = schema.RecordRows(c.batch, c.batch, rec, c.seg.segno, offset, size, db.opts.InlineValueMax, c.scratch)
	r := c.batch.Reader()
	for {
		_, k, val, ok, err := r.Next()
		if err != nil {
			return errs.Wrap(errs.CodeWriteFailed, err, "read scratch batch")
		}
		if !ok {
			return nil
		}
		switch {
		case len(k) == 0:
		case k[0] == schema.TagKey && rec.Seq <= c.v.histFrom[c.id]:
			// A rebuild from a snapshot wrote the state at its frontier,
			// not the history below it: checkDeferred checks what it wrote.
		case k[0] == schema.TagSeq:
			c.checkSeqRow(rec, offset, k, val)
		case k[0] == schema.TagKey && !c.exactRows:
			c.kExpect.add(&c.v.seeds, &c.dbuf, k, val)
		case k[0] == schema.TagIdem && !c.exactRows:
			c.iExpect.add(&c.v.seeds, &c.dbuf, k, val)
		default:
			if err := c.lookupRow(rec, offset, k, val); err != nil {
				return err
			}
		}
	}
}

// checkSeqRow compares the record's 's' row with the one at the cursor.
func (c *anchorCheck) checkSeqRow(rec *segment.Record, offset int64, k, want []byte) {
	row, ok := c.rows.take(rec.Seq)
	if !ok {
		c.report(errs.CodeIndexMismatch, rec.Seq, c.seg.path, offset, "no 's' row for seq %d", rec.Seq)
		return
	}
	// NB: the key is schema.SeqKey(anchor, seq) by construction, and the cursor
	// matched the seq: only the value can differ.
	if bytes.Equal(row, want) {
		return
	}
	got, err := schema.DecodeLocation(row)
	exp, _ := schema.DecodeLocation(want)
	msg := fmt.Sprintf("is malformed: %v", err)
	if err == nil {
		msg = fmt.Sprintf("says segment %d offset %d size %d counter %d hash %s; the record is at segment %d offset %d size %d with counter %d hash %s",
			got.Segno, got.Offset, got.Size, got.Counter, got.Hash, exp.Segno, exp.Offset, exp.Size, exp.Counter, exp.Hash)
	}
	c.report(errs.CodeIndexMismatch, rec.Seq, c.seg.path, offset, "'s' row of seq %d %s", rec.Seq, msg)
}

// lookupRow checks one expected row by reading it from the snapshot.
func (c *anchorCheck) lookupRow(rec *segment.Record, offset int64, k, want []byte) error {
	got, closer, err := c.v.snap.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		c.report(errs.CodeIndexMismatch, rec.Seq, c.seg.path, offset, "no %s for seq %d", schema.RowName(k), rec.Seq)
		return nil
	}
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "read index")
	}
	defer closer.Close()
	if !sameRow(k, got, want, rec.Value) {
		c.report(errs.CodeIndexMismatch, rec.Seq, c.seg.path, offset, "%s disagrees with record seq %d", schema.RowName(k), rec.Seq)
	}
	return nil
}

// sameRow reports whether the row found says what the expected row says. A
// 'k' row may keep a put's value inline or not (the inline limit is an
// option and may have been different when the row was written); an inline
// value must be the record's.
func sameRow(k, got, want, value []byte) bool {
	if bytes.Equal(got, want) {
		return true
	}
	if len(k) == 0 || k[0] != schema.TagKey {
		return false
	}
	g, err1 := schema.DecodeVersion(got)
	w, err2 := schema.DecodeVersion(want)
	if err1 != nil || err2 != nil {
		return false
	}
	if g.Inline && !bytes.Equal(g.Value, value) {
		return false
	}
	g.Inline, g.Value, w.Inline, w.Value = false, nil, false, nil
	return bytes.Equal(g.Append(nil), w.Append(nil))
}

// keyRowPass digests every 'k' row of the snapshot per anchor. It runs as
// one task beside the anchor checks; compareKeyRows uses what it found.
func (v *verifier) keyRowPass() {
	v.kActual = make(map[string]*rowDigest, len(v.jobs))
	for _, c := range v.jobs {
		v.kActual[c.id] = &rowDigest{}
	}
	it, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: []byte{schema.TagKey}, UpperBound: []byte{schema.TagKey + 1}})
	if err != nil {
		v.fail(errs.Wrap(errs.CodeWriteFailed, err, "index iterator"))
		return
	}
	defer it.Close()
	var anchor, buf []byte
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if n++; n%4096 == 0 && v.halted() {
			return
		}
		k := it.Key()
		var good bool
		if anchor, good = schema.VersionKeyAnchor(anchor[:0], k); !good {
			v.report(Finding{Code: errs.CodeIndexMismatch, Message: fmt.Sprintf("malformed 'k' row key %x", k)})
			continue
		}
		d := v.kActual[string(anchor)]
		if d == nil {
			if !v.restricted && !v.known[string(anchor)] {
				v.report(Finding{Code: errs.CodeIndexMismatch, Anchor: string(anchor),
					Message: fmt.Sprintf("'k' row %x names anchor %q, which the index does not know", k, anchor)})
			}
			continue
		}
		var later *scratch.RowSpill
		switch schema.KindOf(it.Value()) {
		case schema.Kept:
			later = v.retained
		case schema.Deferred:
			later = v.deferred
		}
		if later != nil {
			ve, _ := schema.DecodeVersion(it.Value())
			if err := later.Add(anchor, ve.Seq, k, it.Value()); err != nil {
				v.fail(err)
				return
			}
			continue
		}
		d.add(&v.seeds, &buf, k, it.Value())
	}
	if err := it.Error(); err != nil {
		v.fail(errs.Wrap(errs.CodeWriteFailed, err, "index iterator"))
	}
}

// compareKeyRows compares each fully checked anchor's expected 'k' rows with
// those found, and matches the rows of anchors that differ one by one.
func (v *verifier) compareKeyRows() {
	if v.kActual == nil {
		return
	}
	var differ []*anchorCheck
	for _, c := range v.jobs {
		if c.exactRows || !c.complete {
			continue
		}
		if got := v.kActual[c.id]; got == nil || *got != c.kExpect {
			differ = append(differ, c)
		}
	}
	if len(differ) == 0 {
		return
	}
	want := make(map[string]map[string]expectedRow, len(differ))
	for _, c := range differ {
		rows, err := c.expectedRows(schema.TagKey)
		if err != nil {
			v.fail(err)
			return
		}
		want[c.id] = rows
	}
	it, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: []byte{schema.TagKey}, UpperBound: []byte{schema.TagKey + 1}})
	if err != nil {
		v.fail(errs.Wrap(errs.CodeWriteFailed, err, "index iterator"))
		return
	}
	defer it.Close()
	var anchor []byte
	for ok := it.First(); ok; ok = it.Next() {
		var good bool
		if anchor, good = schema.VersionKeyAnchor(anchor[:0], it.Key()); !good {
			continue
		}
		rows := want[string(anchor)]
		if rows == nil || schema.KindOf(it.Value()) != schema.Located {
			continue
		}
		v.byID[string(anchor)].matchRow(rows, it.Key(), it.Value())
	}
	if err := it.Error(); err != nil {
		v.fail(errs.Wrap(errs.CodeWriteFailed, err, "index iterator"))
		return
	}
	for _, c := range differ {
		c.unmatched(want[c.id])
	}
}

// checkIdemRows compares the anchor's expected 'i' rows with those found.
func (c *anchorCheck) checkIdemRows() error {
	if c.exactRows || c.v.halted() {
		return nil
	}
	prefix := schema.AnchorPrefix(schema.TagIdem, c.id)
	scan := func(each func(k, v []byte)) error {
		it, err := c.v.snap.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: schema.PrefixEnd(prefix)})
		if err != nil {
			return errs.Wrap(errs.CodeWriteFailed, err, "index iterator")
		}
		defer it.Close()
		for ok := it.First(); ok; ok = it.Next() {
			each(it.Key(), it.Value())
		}
		if err := it.Error(); err != nil {
			return errs.Wrap(errs.CodeWriteFailed, err, "index iterator")
		}
		return nil
	}
	var got rowDigest
	if err := scan(func(k, v []byte) {
		// The 'i' rows of truncated records outlive them (a key once used
		// is never freed): each must be one the record's stub implies.
		if e, err := schema.DecodeIdem(v); err == nil && c.truncated(e.Seq) {
			c.matchStubIdem(k, v, e.Seq)
			return
		}
		got.add(&c.v.seeds, &c.dbuf, k, v)
	}); err != nil {
		return err
	}
	c.unmatched(c.stubIdem)
	if got == c.iExpect {
		return nil
	}
	rows, err := c.expectedRows(schema.TagIdem)
	if err != nil {
		return err
	}
	if err := scan(func(k, v []byte) {
		if e, err := schema.DecodeIdem(v); err == nil && c.truncated(e.Seq) {
			return
		}
		c.matchRow(rows, k, v)
	}); err != nil {
		return err
	}
	c.unmatched(rows)
	return nil
}

// matchStubIdem checks an 'i' row that names truncated seq against the rows
// the stubs imply.
func (c *anchorCheck) matchStubIdem(k, got []byte, seq uint64) {
	w, ok := c.stubIdem[string(k)]
	if !ok {
		c.report(errs.CodeIndexMismatch, seq, "", 0, "'i' row %x names truncated seq %d, whose stub holds no such idempotency key", k, seq)
		return
	}
	w.found = true
	c.stubIdem[string(k)] = w
	if !bytes.Equal(got, w.value) {
		c.report(errs.CodeIndexMismatch, w.seq, w.path, 0, "'i' row of truncated seq %d says %x; the stub implies %x", w.seq, got, w.value)
	}
}

// expectedRow is a row the index must hold, and the record that implies it.
type expectedRow struct {
	value  []byte
	seq    uint64
	path   string
	offset int64
	rec    []byte // the record's value, for an inline 'k' value
	tag    byte
	found  bool
}

// expectedRows reads the anchor's records again — by their 's' rows, each
// frame checked — and returns the rows with the given tag that they imply,
// by key. Records that cannot be read are left out and noted in unreadable.
func (c *anchorCheck) expectedRows(tag byte) (map[string]expectedRow, error) {
	db, v := c.v.db, c.v
	out := make(map[string]expectedRow)
	prefix := schema.AnchorPrefix(schema.TagSeq, c.id)
	it, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: schema.SeqKey(c.id, c.start), UpperBound: schema.PrefixEnd(prefix)})
	if err != nil {
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "index iterator")
	}
	defer it.Close()
	fr := db.newFrameReader(c.id)
	defer fr.close()
	batch := db.index.NewBatch()
	defer batch.Close()
	var scratch []byte
	for ok := it.First(); ok; ok = it.Next() {
		row, _, err := decodeSeqRow(prefix, it.Key(), it.Value())
		if err != nil || row.seq > c.last || c.unreadable[row.seq] || row.Size == 0 {
			continue
		}
		if tag == schema.TagKey && row.seq <= v.histFrom[c.id] {
			// As in expectRows: a rebuild from a snapshot wrote the state
			// there, not these rows (checkHistoryFrom checks what it wrote).
			continue
		}
		rec, err := fr.read(row.seq, row.Location)
		if err != nil {
			c.unreadable[row.seq] = true
			continue
		}
		batch.Reset()
		scratch = schema.RecordRows(batch, batch, &rec, row.Segno, row.Offset, int(row.Size), db.opts.InlineValueMax, scratch)
		r := batch.Reader()
		for {
			_, k, val, ok, err := r.Next()
			if err != nil || !ok {
				break
			}
			if len(k) > 0 && k[0] == tag {
				out[string(k)] = expectedRow{value: slices.Clone(val), seq: row.seq, path: c.segPath(row.Segno), offset: row.Offset, rec: rec.Value, tag: tag}
			}
		}
	}
	if err := it.Error(); err != nil {
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "index iterator")
	}
	return out, nil
}

// matchRow checks one row found against the expected rows.
func (c *anchorCheck) matchRow(rows map[string]expectedRow, k, got []byte) {
	w, ok := rows[string(k)]
	if !ok {
		seq, loc := schema.RowSeq(k, got), ""
		if c.unreadable[seq] {
			return // its record is already reported
		}
		if seq > 0 && seq <= c.last {
			if e, ok, _ := c.rowAt(seq); ok {
				loc = c.segPath(e.Segno)
			}
		}
		c.report(errs.CodeIndexMismatch, seq, loc, 0, "%s %x is not implied by any record (it names seq %d)", schema.RowName(k), k, seq)
		return
	}
	w.found = true
	rows[string(k)] = w
	if !sameRow(k, got, w.value, w.rec) {
		c.report(errs.CodeIndexMismatch, w.seq, w.path, w.offset, "%s of record seq %d says %x; the record implies %x", schema.RowName(k), w.seq, got, w.value)
	}
}

// unmatched reports the expected rows no row was found for.
func (c *anchorCheck) unmatched(rows map[string]expectedRow) {
	var missing []expectedRow
	for _, w := range rows {
		if !w.found {
			missing = append(missing, w)
		}
	}
	slices.SortFunc(missing, func(a, b expectedRow) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return 0
	})
	for _, w := range missing {
		c.report(errs.CodeIndexMismatch, w.seq, w.path, w.offset, "the index has no %s for record seq %d", schema.RowName([]byte{w.tag}), w.seq)
	}
}

// checkDeferred checks the 'k' rows a rebuild from a snapshot wrote for the
// state at its frontier: each must lie within that frontier and say what the
// record at its seq says.
func (v *verifier) checkDeferred() {
	// In record order (RowSpill's), so one reader per anchor goes through
	// its segments once: a reader per row read 256 KiB for each of them,
	// which made verify after a rebuild of 1M records take minutes.
	var fr *frameReader
	defer func() {
		if fr != nil {
			fr.close()
		}
	}()
	v.eachVersionRow(v.deferred, "'k' row of seq %d without a location", func(c *anchorCheck, r scratch.Row, ve schema.Version, bad func(string, ...any)) bool {
		if ve.Seq > v.histFrom[r.Group] {
			bad("no rebuild from a snapshot covers it (the rebuilt range ends at seq %d)", v.histFrom[r.Group])
			return true
		}
		row, ok, err := c.rowAt(ve.Seq)
		if err != nil {
			v.fail(err)
			return false
		}
		if !ok || row.Size == 0 {
			bad("its record is not in a segment")
			return true
		}
		if fr == nil || fr.anchor != r.Group {
			if fr != nil {
				fr.close()
			}
			fr = v.db.newFrameReader(r.Group)
		}
		rec, err := fr.read(ve.Seq, row)
		switch {
		case errs.CodeOf(err) == errs.CodeWriteFailed:
			v.fail(err) // the disk, not the record
			return false
		case err != nil:
			bad("its record cannot be read: %s", errs.Message(err))
		case rec.Hash != ve.Hash || rec.Time != ve.Time:
			bad("it says hash %s; the record has %s", ve.Hash, rec.Hash)
		default:
			if why := versionDiffers(r, ve, &rec); why != "" {
				bad("%s", why)
			}
		}
		return true
	})
}

// checkRetained checks the 'k' rows compaction kept for truncated records:
// each must be the record kept in its 'r' row — whose hash is the one the
// chain has at that seq — with its key, counter, type and value.
func (v *verifier) checkRetained() {
	v.eachVersionRow(v.retained, "'k' row kept for truncated seq %d", func(c *anchorCheck, r scratch.Row, ve schema.Version, bad func(string, ...any)) bool {
		frame, closer, err := v.snap.Get(schema.KeptKey(r.Group, ve.Seq))
		if errors.Is(err, pebble.ErrNotFound) {
			bad("no 'r' row holds the record")
			return true
		}
		if err != nil {
			v.fail(errs.Wrap(errs.CodeWriteFailed, err, "read index"))
			return false
		}
		defer closer.Close()
		rec, n, err := segment.ParseFrame(r.Group, frame)
		var ok bool
		var row schema.Location
		if err == nil {
			// NB: rowAt reports a malformed row itself; its error is I/O,
			// not something the 'r' row holds.
			var rerr error
			if row, ok, rerr = c.rowAt(ve.Seq); rerr != nil {
				v.fail(rerr)
				return false
			}
		}
		switch {
		case err != nil:
			bad("its 'r' row does not hold a record: %s", errs.Message(err))
		case n != len(frame) || rec.Seq != ve.Seq:
			bad("its 'r' row holds seq %d", rec.Seq)
		case !ok || row.Hash != rec.Hash || ve.Hash != rec.Hash:
			bad("the record kept has hash %s; the chain has %s", rec.Hash, row.Hash)
		case ve.Type == schema.VersionPut && !ve.Inline:
			bad("it does not hold the value inline")
		default:
			if why := versionDiffers(r, ve, &rec); why != "" {
				bad("%s", why)
			}
		}
		return true
	})
}

// eachVersionRow calls check for each row of a fully checked anchor, with a
// report function whose message starts with what (which formats the seq).
// check returns false to stop.
func (v *verifier) eachVersionRow(rows *scratch.RowSpill, what string, check func(c *anchorCheck, r scratch.Row, ve schema.Version, bad func(string, ...any)) bool) {
	err := rows.Each(func(r scratch.Row) bool {
		if v.halted() {
			return false
		}
		c := v.byID[r.Group]
		if c == nil || !c.complete {
			return true
		}
		ve, _ := schema.DecodeVersion(r.Value)
		bad := func(format string, args ...any) {
			c.report(errs.CodeIndexMismatch, ve.Seq, "", 0, what+": "+format, append([]any{ve.Seq}, args...)...)
		}
		return check(c, r, ve, bad)
	})
	if err != nil {
		v.fail(err)
	}
}

// versionDiffers says how a 'k' row disagrees with its record, or "".
func versionDiffers(r scratch.Row, ve schema.Version, rec *segment.Record) string {
	switch {
	case !bytes.Equal(r.Key, schema.VersionKey(rec.Key, rec.Counter, r.Group)):
		return "its key does not name the record's key and counter"
	case (rec.Type == segment.TypeDelete) != (ve.Type == schema.VersionDelete) || (ve.Inline && !bytes.Equal(ve.Value, rec.Value)):
		return "it does not say what the record says"
	}
	return ""
}
