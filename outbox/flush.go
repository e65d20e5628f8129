package outbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"sort"
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
)

// mark is the value of the mark row ('w'): the watermark W that the r, l
// and d rows stand at — every entry's rows are those of its state after
// the records up to seq W — and the counts by state there.
type mark struct {
	w      uint64
	counts counts
	// from are the claims' scan starts of the r and l rows (state.from)
	// when the mark was written, or before: every live row at W of those
	// kinds is at or after them. nil: the kind's first key.
	from [2][]byte
}

type markJSON struct {
	V      int        `json:"v"`
	W      uint64     `json:"w"`
	Counts countsJSON `json:"counts"`
	// RFrom and LFrom are from[0] and from[1] after the kind's prefix.
	RFrom *bytesJSON `json:"r_from"`
	LFrom *bytesJSON `json:"l_from"`
}

type countsJSON struct {
	Pending  int64 `json:"pending"`
	Inflight int64 `json:"inflight"`
	Done     int64 `json:"done"`
	Dead     int64 `json:"dead"`
	Aborted  int64 `json:"aborted"`
}

func (k keys) encodeMark(m mark) []byte {
	c := m.counts
	j := markJSON{V: 1, W: m.w, Counts: countsJSON{c[0], c[1], c[2], c[3], c[4]}}
	n := len(k.prefix) + 1
	if f := m.from[0]; f != nil {
		b := bytesJSON(f[n:])
		j.RFrom = &b
	}
	if f := m.from[1]; f != nil {
		b := bytesJSON(f[n:])
		j.LFrom = &b
	}
	b, _ := marshal(j)
	return b
}

func (k keys) decodeMark(name string, value []byte, rc engine.Receipt) (mark, error) {
	var j markJSON
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.DisallowUnknownFields()
	err := dec.Decode(&j)
	if err == nil && dec.More() {
		err = errors.New("data after the mark")
	}
	if err == nil && j.V != 1 {
		err = errors.New("mark version is not 1")
	}
	m := mark{w: j.W, counts: counts{j.Counts.Pending, j.Counts.Inflight, j.Counts.Done, j.Counts.Dead, j.Counts.Aborted}}
	if j.RFrom != nil {
		m.from[0] = append(k.kind(kindReady), *j.RFrom...)
	}
	if j.LFrom != nil {
		m.from[1] = append(k.kind(kindLease), *j.LFrom...)
	}
	if err == nil && !bytes.Equal(k.encodeMark(m), value) {
		err = errors.New("not in the canonical form")
	}
	if err == nil && m.w >= rc.Seq {
		err = errors.New("the watermark is not below the mark's own record")
	}
	if err != nil {
		e := errs.Wrap(errs.CodeIndexMismatch, err, "outbox %q: mark row (seq %d)", name, rc.Seq)
		e.Anchor, e.Seq = rc.Anchor, rc.Seq
		return mark{}, e
	}
	return m, nil
}

// load reads the mark and then the anchor's records past it, taking each
// into memory. When records past the mark are missing (a compaction
// truncated the log past it), the rows are rebuilt from the entry rows
// instead (rematerialize).
func (o *Outbox) load(ctx context.Context) error {
	v, err := o.db.Get(ctx, o.k.mark())
	switch {
	case errors.Is(err, engine.ErrNotFound):
	case err != nil:
		return err
	default:
		if v.Anchor != o.anchor {
			return errs.New(errs.CodeIndexMismatch, "outbox %q: its mark row was written by anchor %q", o.name, v.Anchor)
		}
		m, err := o.k.decodeMark(o.name, v.Value, v.Receipt)
		if err != nil {
			return err
		}
		o.st.mark = m
		o.st.from = m.from
		o.st.contig, o.st.maxSeen = m.w, m.w
		o.st.counts = m.counts
	}
	info, _, err := o.db.AnchorInfo(ctx, o.anchor)
	if err != nil {
		return err
	}
	gap, err := o.readLog(ctx, o.st.contig+1, info.Records)
	if err != nil {
		return err
	}
	if gap {
		if o.opts.ReadOnly {
			return errs.New(errs.CodeDependencyMissing, "outbox %q: records past its watermark (seq %d) were truncated; open it for writing once to rebuild its rows", o.name, o.st.mark.w)
		}
		return o.rematerialize(ctx)
	}
	o.st.probe = info.Records
	return nil
}

// readLog takes the anchor's records from..to into memory. It reports a gap
// when records in the range are missing (truncated by a compaction).
func (o *Outbox) readLog(ctx context.Context, from, to uint64) (gap bool, err error) {
	if to < from {
		return false, nil
	}
	next := from
	for rec, err := range o.db.Log(ctx, o.anchor, from, to) {
		if err != nil {
			if isGoneRun(err, o.anchor) {
				gap = true
				continue
			}
			return false, err
		}
		if rec.Seq != next {
			gap = true
		}
		next = rec.Seq + 1
		if err := o.takeRecord(&rec); err != nil {
			return false, err
		}
	}
	return gap || next != to+1, nil
}

// takeRecord takes one record of the anchor, read from the log, into
// memory. An entry row that does not decode is an error (INT_004): Verify
// says more.
func (o *Outbox) takeRecord(rec *engine.Record) error {
	id, isEntry := o.k.parseEntryKey(rec.Key)
	if !isEntry || rec.Type != segment.TypePut {
		if isEntry && rec.Type == segment.TypeDelete {
			e := errs.New(errs.CodeIndexMismatch, "outbox %q entry %q: record %d deletes its row: an id is never freed", o.name, id, rec.Seq)
			e.Anchor, e.Seq = rec.Anchor, rec.Seq
			return e
		}
		o.mu.Lock()
		o.st.see(rec.Seq, delta{})
		o.mu.Unlock()
		return nil
	}
	rc := engine.Receipt{Anchor: rec.Anchor, Seq: rec.Seq, Counter: rec.Counter, Hash: rec.Hash}
	d, err := decodeRecord(o.name, id, rec.Value, rc)
	if err != nil {
		return err
	}
	o.mu.Lock()
	if o.st.see(rec.Seq, delta{from: d.prev.state, to: d.entry.State}) {
		o.st.apply(id, rc, rec.Value, &d.entry, d.prev)
	}
	o.mu.Unlock()
	return nil
}

// The value of an r, l or d row is the entry's record at the watermark:
// its receipt (seq and counter, 8 bytes each, big-endian; its hash) and
// then the record's value, so that a claim or a listing reads the entry
// with the row.
const rowValueHeader = 8 + 8 + segment.HashSize

func rowValue(rc engine.Receipt, val []byte) []byte {
	b := make([]byte, 0, rowValueHeader+len(val))
	b = binary.BigEndian.AppendUint64(b, rc.Seq)
	b = binary.BigEndian.AppendUint64(b, rc.Counter)
	b = append(b, rc.Hash[:]...)
	return append(b, val...)
}

// decodeRow returns the entry a row of kind c holds.
func (o *Outbox) decodeRow(c byte, key, value []byte) (*Entry, error) {
	return decodeRowEntry(o.k, o.name, c, key, value)
}

func decodeRowEntry(k keys, name string, c byte, key, value []byte) (*Entry, error) {
	_, _, id, ok := k.parseRow(c, key)
	if !ok || len(value) < rowValueHeader {
		return nil, errs.New(errs.CodeIndexMismatch, "outbox %q: row %q is not an outbox row", name, key)
	}
	rc := engine.Receipt{Anchor: AnchorPrefix + name, Seq: binary.BigEndian.Uint64(value), Counter: binary.BigEndian.Uint64(value[8:])}
	copy(rc.Hash[:], value[16:rowValueHeader])
	d, err := decodeTrusted(name, id, value[rowValueHeader:], rc)
	if err != nil {
		return nil, err
	}
	return &d.entry, nil
}

// flusher flushes in the background: every FlushInterval after an entry
// changed, and when FlushEntries have.
func (o *Outbox) flusher(ctx context.Context) {
	defer close(o.bgDone)
	var tick <-chan time.Time
	if o.opts.FlushInterval > 0 {
		t := time.NewTicker(o.opts.FlushInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-o.stop:
			return
		case <-tick:
		case <-o.flushReq:
		}
		if err := o.flush(ctx); err != nil && o.opts.Logger != nil && ctx.Err() == nil {
			o.opts.Logger.Errorf("outbox %q: flush: %v", o.name, err)
		}
	}
}

// Flush writes the index rows of the entries changed since the last flush,
// with a new mark, in one atomic append. The background flusher calls it
// on its own; a caller may to make the rows current (a read of the rows —
// Stats, List, Dead — never needs it: it merges the changes in memory).
func (o *Outbox) Flush(ctx context.Context) error {
	if err := o.enter(true); err != nil {
		return err
	}
	defer o.leave()
	return o.flush(ctx)
}

// flushed is one entry a flush writes rows for.
type flushed struct {
	h      *hotEntry
	id     string
	enq    uint64
	before rowRef // the rows it has
	row    rowRef // its state's row at the watermark
	target *ver   // the record of that state
	key    []byte // the row's key, when it has one
	lowers bool   // its row may lower the mark's scan starts
}

// flush: see Flush. Records the Outbox has not seen up to the probe (the
// head at the last flush: records not its own, such as an ingest's) are
// read from the log first. The rows of each changed entry become those of
// its state at the watermark W = the last seq up to which every record is
// seen; an entry changed again after W stays changed. Once the batch is
// appended, a read that waits for the index to apply everything before it
// lets the Outbox forget the entries with nothing past W.
func (o *Outbox) flush(ctx context.Context) error {
	o.flushMu.Lock()
	defer o.flushMu.Unlock()
	o.mu.Lock()
	contig, probe := o.st.contig, o.st.probe
	o.mu.Unlock()
	if contig < probe {
		if _, err := o.readLog(ctx, contig+1, probe); err != nil {
			return err
		}
	}

	// Under o.mu only what memory says: which entries, which rows, which
	// records. The keys and values are built after.
	o.mu.Lock()
	W := o.flushPoint()
	var plan []flushed
	// The mark's scan starts are the claims' own, or the row at W of an
	// entry changed since the mark, or of a reserved one, whichever is
	// first. (An entry in memory and unchanged has its row at or after
	// them: a claim's scan passes only rows it takes, reserves or finds
	// changed, and the flush that left the entry unchanged moved them back
	// to its row.)
	var low []rowKey
	for _, r := range o.st.reservedRows {
		low = append(low, r)
	}
	for id, h := range o.st.dirty {
		f := flushed{h: h, id: id, enq: h.cur.EnqueueSeq, before: h.rows, row: h.rows}
		for i := range h.vers {
			if h.vers[i].seq > W {
				break
			}
			f.target = &h.vers[i]
			f.row = f.target.row
		}
		plan = append(plan, f)
	}
	m := mark{w: W, counts: o.st.countsAt(W), from: o.st.from}
	o.mu.Unlock()

	var entries []engine.Entry
	flushing := 0
	for i := range plan {
		f := &plan[i]
		c := rowKind(f.row.state)
		if c != 0 {
			f.key = o.k.row(c, f.row.at, f.enq, f.id)
			if c != kindDead {
				low = append(low, rowKey{kind: c, key: f.key})
			}
		}
		if f.target == nil {
			continue // all its records are past W: its rows stay
		}
		flushing++
		if b := rowKind(f.before.state); b != 0 && !sameRow(f.row, f.before) {
			entries = append(entries, engine.Entry{Anchor: o.anchor, Type: segment.TypeDelete, Key: o.k.row(b, f.before.at, f.enq, f.id)})
		}
		// The row's value is the record: put even a row whose key stays.
		if f.key != nil {
			entries = append(entries, engine.Entry{Anchor: o.anchor, Type: segment.TypePut, Key: f.key, Value: rowValue(f.target.rc, f.target.val)})
		}
	}
	if flushing == 0 {
		return nil
	}
	for _, r := range low {
		if i := fromIdx(r.kind); m.from[i] != nil && bytes.Compare(r.key, m.from[i]) < 0 {
			m.from[i] = r.key
		}
	}
	entries = append(entries, engine.Entry{Anchor: o.anchor, Type: segment.TypePut, Key: o.k.mark(), Value: o.k.encodeMark(m)})
	rs, err := o.db.AppendBatch(ctx, entries, o.wopts...)
	if err != nil {
		return err
	}
	o.mu.Lock()
	for i := range plan {
		f := &plan[i]
		if f.target == nil {
			continue
		}
		h := f.h
		h.rows = f.row
		// Its row may be live again behind the claims' scans.
		if f.key != nil && (f.row.state == StatePending || f.row.state == StateInflight) {
			o.st.rewind(rowKind(f.row.state), f.key)
		}
		j := 0
		for j < len(h.vers) && h.vers[j].seq <= W {
			j++
		}
		h.vers = h.vers[j:]
		if len(h.vers) == 0 {
			delete(o.st.dirty, f.id)
			o.st.clean[f.id] = h
		}
	}
	for _, r := range rs {
		o.st.see(r.Seq, delta{})
	}
	i := 0
	for i < len(o.st.sinceMark) && o.st.sinceMark[i].seq <= W {
		i++
	}
	o.st.sinceMark = append(o.st.sinceMark[:0], o.st.sinceMark[i:]...)
	o.st.mark = m
	o.mu.Unlock()

	// The barrier: AnchorInfo waits until every append acknowledged before
	// it began is applied to the index, where GetApplied finds it.
	info, _, err := o.db.AnchorInfo(ctx, o.anchor)
	if err != nil {
		return err
	}
	o.mu.Lock()
	o.st.probe = info.Records
	for id, h := range o.st.clean {
		if h.seq <= W && !o.st.reserved[id] {
			delete(o.st.hot, id)
			delete(o.st.clean, id)
		}
	}
	o.mu.Unlock()
	return nil
}

// Bounds of one flush's batch. A flush at W writes the rows of every entry
// changed by the records after the mark up to W, in one atomic append (so
// that the mark and the rows agree whatever a crash leaves); when those
// would not fit, it picks an earlier W.
var (
	maxFlushBytes   = 64 << 20
	maxFlushEntries = 1 << 16
)

// flushPoint returns the watermark of the next flush: contig, or the last
// seq before the first record whose entry would take the batch past its
// bounds. o.mu is held.
func (o *Outbox) flushPoint() uint64 {
	type first struct {
		seq  uint64
		size int
	}
	var fs []first
	total := 4096 // the mark
	for id, h := range o.st.dirty {
		if h.vers[0].seq > o.st.contig {
			continue
		}
		big := 0
		for _, v := range h.vers {
			if v.seq > o.st.contig {
				break
			}
			big = max(big, len(v.val))
		}
		// A delete and a put of its row, the latter holding a record.
		size := 2*(len(o.k.prefix)+1+16+len(id)+engine.RecordOverhead) + rowValueHeader + big
		fs = append(fs, first{h.vers[0].seq, size})
		total += size
	}
	if total <= maxFlushBytes && len(fs) <= maxFlushEntries {
		return o.st.contig
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].seq < fs[j].seq })
	total = 4096
	for i, f := range fs {
		total += f.size
		if i > 0 && (total > maxFlushBytes || i >= maxFlushEntries) {
			return f.seq - 1
		}
	}
	return o.st.contig
}

// sameRow reports whether two states have the same index row.
func sameRow(a, b rowRef) bool {
	ka, kb := rowKind(a.state), rowKind(b.state)
	return ka == kb && (ka == 0 || a.at == b.at)
}

// rematerialize rebuilds the index rows from the entry rows: the rows every
// entry's latest state implies are compared with the rows there are, the
// difference written in batches, and then a mark at the head. It runs at
// Open, before anything else touches the outbox, when the log past the mark
// cannot be read whole; a crash midway leaves the old mark, so the next
// Open runs it again, and it only ever writes what differs.
func (o *Outbox) rematerialize(ctx context.Context) error {
	info, _, err := o.db.AnchorInfo(ctx, o.anchor)
	if err != nil {
		return err
	}
	want := map[string][]byte{}
	var c counts
	for v, err := range o.db.ScanRange(ctx, o.k.kind(kindEntry), o.k.kindEnd(kindEntry)) {
		if err != nil {
			return err
		}
		id, _ := o.k.parseEntryKey(v.Key)
		d, err := decodeRecord(o.name, id, v.Value, v.Receipt)
		if err != nil {
			return err
		}
		e := &d.entry
		c[e.State-1]++
		if k := rowKind(e.State); k != 0 {
			want[string(o.k.row(k, e.rowTime(), e.EnqueueSeq, id))] = rowValue(v.Receipt, v.Value)
		}
	}
	var batch []engine.Entry
	put := func(e engine.Entry) error {
		batch = append(batch, e)
		if len(batch) < 4096 {
			return nil
		}
		_, err := o.db.AppendBatch(ctx, batch, o.wopts...)
		batch = batch[:0]
		return err
	}
	for _, kind := range []byte{kindDead, kindLease, kindReady} {
		for v, err := range o.db.ScanRange(ctx, o.k.kind(kind), o.k.kindEnd(kind)) {
			if err != nil {
				return err
			}
			if w, ok := want[string(v.Key)]; ok && bytes.Equal(w, v.Value) {
				delete(want, string(v.Key))
				continue
			} else if ok {
				continue // put below with the right value
			}
			if err := put(engine.Entry{Anchor: o.anchor, Type: segment.TypeDelete, Key: append([]byte(nil), v.Key...)}); err != nil {
				return err
			}
		}
	}
	for k, v := range want {
		if err := put(engine.Entry{Anchor: o.anchor, Type: segment.TypePut, Key: []byte(k), Value: v}); err != nil {
			return err
		}
	}
	m := mark{w: info.Records, counts: c}
	batch = append(batch, engine.Entry{Anchor: o.anchor, Type: segment.TypePut, Key: o.k.mark(), Value: o.k.encodeMark(m)})
	rs, err := o.db.AppendBatch(ctx, batch, o.wopts...)
	if err != nil {
		return err
	}
	last := rs[len(rs)-1].Seq
	o.st = state{hot: map[string]*hotEntry{}, ids: o.st.ids, dirty: map[string]*hotEntry{}, clean: map[string]*hotEntry{},
		reserved: map[string]bool{}, reservedRows: map[string]rowKey{}, ahead: map[uint64]delta{},
		counts: c, mark: m, contig: last, maxSeen: last, probe: last}
	return nil
}
