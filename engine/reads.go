package engine

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"time"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
)

// Hash is a BLAKE3-256 hash as anchordb prints it ("blake3:<64 hex>"): a
// record's hash, a tree root.
type Hash = segment.Hash

// Record is one record of an anchor's log, whole: what Record, Log, History
// and Merged return, each read from its segment (or the copy a compaction
// kept) and checked against its hash. Its fields are the record shape of
// the JSON the CLI prints.
//
// Get, GetAt, Scan, ScanRange and Versions return a Version instead: what
// the index alone holds of a key's version (its value, time and receipt),
// answered without reading the segment — most Gets read one index row. A
// record's PrevHash and IdempotencyKey are only in the segment (and an
// event, which changes no key, has no Version); db.Record(ctx, v.Anchor,
// v.Seq) reads the whole record of a Version.
type Record struct {
	Anchor  string
	Seq     uint64
	Counter uint64
	// Time is the record time, in UTC (nanoseconds are kept: the log
	// stores Unix nanoseconds).
	Time time.Time
	// Type is "put", "delete" or an event's type.
	Type string
	// Key is empty for an event without one.
	Key []byte
	// Value is a put's value or an event's payload; empty for a delete.
	Value []byte
	// IdempotencyKey is empty when the append carried none.
	IdempotencyKey []byte
	// PrevHash is the hash of the record before it (seq 1: the anchor's
	// genesis hash).
	PrevHash Hash
	// Hash is the record's hash, which covers every field above.
	Hash Hash
}

// Receipt returns the record's receipt (Duplicate false).
func (r *Record) Receipt() Receipt {
	return Receipt{Anchor: r.Anchor, Seq: r.Seq, Counter: r.Counter, Hash: r.Hash}
}

// IsEvent reports whether the record is an event: a type other than put and
// delete, with no key-value effect.
func (r *Record) IsEvent() bool { return !r.segment().IsKV() }

// ComputeHash recomputes the record's hash from its fields (the canonical
// encoding of docs/FORMAT.md §3.1): Hash, for an intact record.
func (r *Record) ComputeHash() Hash { return r.segment().ComputeHash() }

// segment returns r in the segment codec's form.
func (r *Record) segment() *segment.Record {
	return &segment.Record{Anchor: r.Anchor, Seq: r.Seq, Counter: r.Counter, Time: r.Time.UnixNano(), Type: r.Type,
		Key: r.Key, Value: r.Value, IdempotencyKey: r.IdempotencyKey, PrevHash: r.PrevHash, Hash: r.Hash}
}

// newRecord returns r, a record the caller owns, as a Record.
func newRecord(r *segment.Record) Record {
	return Record{Anchor: r.Anchor, Seq: r.Seq, Counter: r.Counter, Time: recordTime(r.Time), Type: r.Type,
		Key: r.Key, Value: r.Value, IdempotencyKey: r.IdempotencyKey, PrevHash: r.PrevHash, Hash: r.Hash}
}

// recordTime is a record time (Unix nanoseconds) as a time.Time in UTC.
func recordTime(ns int64) time.Time { return time.Unix(0, ns).UTC() }

// Version is one version of a key as the index holds it: its value (none
// for a delete, with Deleted set), the record's time, and the receipt of
// the record that wrote it. See Record for why reads of a key return
// Versions and reads of a log Records.
type Version struct {
	Key     []byte
	Value   []byte
	Deleted bool
	Time    time.Time // the record time, in UTC
	Receipt
}

// Get returns the value of key: the last put or delete of it in merged order
// (SPEC §4). A missing or deleted key returns ErrNotFound.
func (db *DB) Get(ctx context.Context, key []byte) (Version, error) {
	if err := db.beginRead(ctx); err != nil {
		return Version{}, err
	}
	defer db.endRead()
	v, err := db.latest(ctx, db.index, key)
	if err != nil {
		return v, err
	}
	if v.Deleted {
		return Version{Key: v.Key, Deleted: true, Receipt: v.Receipt}, ErrNotFound
	}
	return v, nil
}

// latest returns the newest version of key, deleted or not.
func (db *DB) latest(ctx context.Context, r pebble.Reader, key []byte) (Version, error) {
	if err := ctx.Err(); err != nil {
		return Version{}, err
	}
	it, err := db.versionRows(r, key)
	if err != nil {
		return Version{}, err
	}
	defer it.Close()
	if !it.First() {
		if err := it.Error(); err != nil {
			return Version{}, errs.Wrap(errs.CodeWriteFailed, err, "read index")
		}
		return Version{Key: key}, ErrNotFound
	}
	return db.decodeVersion(ctx, it.Key(), it.Value())
}

// versionRows checks key and returns an iterator over its 'k' rows in r,
// newest version first: what Get, GetAt, History and Versions read.
func (db *DB) versionRows(r pebble.Reader, key []byte) (*pebble.Iterator, error) {
	if len(key) == 0 || len(key) > db.opts.Limits.MaxKey {
		return nil, errs.New(errs.CodeInvalidInput, "key is %d bytes (must be 1..%d)", len(key), db.opts.Limits.MaxKey)
	}
	lower := schema.KeyPrefix(key)
	upper := append(lower[:len(lower)-1:len(lower)-1], 2)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "index iterator")
	}
	return it, nil
}

// decodeVersion turns a 'k' row into a Version, reading the value from its
// segment when it is not inline.
func (db *DB) decodeVersion(ctx context.Context, k, v []byte) (Version, error) {
	key, counter, anchor, err := schema.ParseVersionKey(k)
	if err != nil {
		return Version{}, errs.Wrap(errs.CodeIndexMismatch, err, "read index")
	}
	ve, err := schema.DecodeVersion(v)
	if err != nil {
		return Version{}, errs.Wrap(errs.CodeIndexMismatch, err, "key %q", key)
	}
	out := Version{Key: key, Deleted: ve.Type == schema.VersionDelete, Time: recordTime(ve.Time),
		Receipt: Receipt{Anchor: anchor, Seq: ve.Seq, Counter: counter, Hash: ve.Hash}}
	switch {
	case out.Deleted:
	case ve.Inline:
		out.Value = append([]byte(nil), ve.Value...)
	default:
		rec, err := db.readVersionFrame(ctx, anchor, counter, &ve)
		if err != nil {
			return Version{}, err
		}
		out.Value = rec.Value
	}
	return out, nil
}

// History returns every version of key in merged order, oldest first, as the
// records that wrote them (Versions returns the same without reading whole
// records). A version whose record a compaction removed, where only the
// index's copy of the version is left (an index rebuilt from a snapshot),
// comes without its PrevHash and IdempotencyKey (zero).
func (db *DB) History(ctx context.Context, key []byte) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		if err := db.beginRead(ctx); err != nil {
			yield(Record{}, err)
			return
		}
		defer db.endRead()
		it, err := db.versionRows(db.index, key)
		if err != nil {
			yield(Record{}, err)
			return
		}
		defer it.Close()
		// Versions are stored newest first; history reads them backwards.
		for ok := it.Last(); ok; ok = it.Prev() {
			if err := ctx.Err(); err != nil {
				yield(Record{}, err)
				return
			}
			_, counter, anchor, err := schema.ParseVersionKey(it.Key())
			if err != nil {
				yield(Record{}, errs.Wrap(errs.CodeIndexMismatch, err, "read index"))
				return
			}
			ve, err := schema.DecodeVersion(it.Value())
			if err != nil {
				yield(Record{}, errs.Wrap(errs.CodeIndexMismatch, err, "key %q", key))
				return
			}
			rec, err := db.readVersionFrame(ctx, anchor, counter, &ve)
			if err != nil && ve.Size == 0 && errors.Is(err, ErrDependencyMissing) {
				// The record was truncated and only its version survives (a
				// rebuild restored it from a snapshot): give what the index
				// holds. PrevHash and IdempotencyKey are unknown (zero).
				rec, err = segment.Record{Anchor: anchor, Seq: ve.Seq, Counter: counter, Time: ve.Time,
					Type: segment.TypePut, Key: append([]byte(nil), key...), Value: append([]byte(nil), ve.Value...), Hash: ve.Hash}, nil
				if ve.Type == schema.VersionDelete {
					rec.Type, rec.Value = segment.TypeDelete, nil
				}
			}
			if !yield(newRecord(&rec), err) || err != nil {
				return
			}
		}
		if err := it.Error(); err != nil {
			yield(Record{}, errs.Wrap(errs.CodeWriteFailed, err, "read index"))
		}
	}
}

// Versions returns every version of key in merged order, oldest first: its
// value (none for a delete, with Deleted set) and the receipt of the record
// that wrote it (SPEC §4's History). Unlike History, which returns whole
// records, it reads a record only for a value kept out of line, so a key
// whose values are small costs one index scan however many versions it has.
func (db *DB) Versions(ctx context.Context, key []byte) iter.Seq2[Version, error] {
	return func(yield func(Version, error) bool) {
		if err := db.beginRead(ctx); err != nil {
			yield(Version{}, err)
			return
		}
		defer db.endRead()
		it, err := db.versionRows(db.index, key)
		if err != nil {
			yield(Version{}, err)
			return
		}
		defer it.Close()
		// Stored newest first; read backwards.
		for ok := it.Last(); ok; ok = it.Prev() {
			if err := ctx.Err(); err != nil {
				yield(Version{}, err)
				return
			}
			v, err := db.decodeVersion(ctx, it.Key(), it.Value())
			if !yield(v, err) || err != nil {
				return
			}
		}
		if err := it.Error(); err != nil {
			yield(Version{}, errs.Wrap(errs.CodeWriteFailed, err, "read index"))
		}
	}
}

// Scan returns the live keys that start with prefix, in byte order, with
// their latest values. An empty prefix scans everything.
func (db *DB) Scan(ctx context.Context, prefix []byte) iter.Seq2[Version, error] {
	lower, upper := schema.ScanBounds(prefix)
	return db.scan(ctx, lower, upper)
}

// ScanRange returns the live keys in [start, end) in byte order; a nil end
// means no upper bound.
func (db *DB) ScanRange(ctx context.Context, start, end []byte) iter.Seq2[Version, error] {
	lower, upper := schema.RangeBounds(start, end)
	return db.scan(ctx, lower, upper)
}

func (db *DB) scan(ctx context.Context, lower, upper []byte) iter.Seq2[Version, error] {
	return func(yield func(Version, error) bool) {
		if err := db.beginRead(ctx); err != nil {
			yield(Version{}, err)
			return
		}
		defer db.endRead()
		it, err := db.index.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
		if err != nil {
			yield(Version{}, errs.Wrap(errs.CodeWriteFailed, err, "index iterator"))
			return
		}
		defer it.Close()
		for ok := it.First(); ok; {
			if err := ctx.Err(); err != nil {
				yield(Version{}, err)
				return
			}
			v, err := db.decodeVersion(ctx, it.Key(), it.Value())
			if err != nil {
				yield(Version{}, err)
				return
			}
			if !v.Deleted && !yield(v, nil) {
				return
			}
			// Skip the older versions of this key.
			ok = schema.NextKey(it, schema.AppendPastVersions(nil, v.Key))
		}
		if err := it.Error(); err != nil {
			yield(Version{}, errs.Wrap(errs.CodeWriteFailed, err, "read index"))
		}
	}
}

// Record returns record seq of the anchor, read from its segment and checked
// against its hash. A record a compaction removed is the copy it kept (a
// key's last record in the removed segment), or STATE_003.
func (db *DB) Record(ctx context.Context, anchor string, seq uint64) (Record, error) {
	if db.filesOnly() {
		rec, err := db.fileRecord(ctx, anchor, seq) // a read-only open without the index
		if err != nil {
			return Record{}, err
		}
		return newRecord(&rec), nil
	}
	if err := db.beginRead(ctx); err != nil {
		return Record{}, err
	}
	defer db.endRead()
	rec, err := db.record(ctx, anchor, seq)
	if err != nil {
		return Record{}, err
	}
	return newRecord(&rec), nil
}

// record is Record in the codec's form, for a caller that holds the read
// gate.
func (db *DB) record(ctx context.Context, anchor string, seq uint64) (segment.Record, error) {
	// An illegal id is bad input, not a record that is missing (yet).
	if err := segment.ValidateAnchorID(anchor); err != nil {
		return segment.Record{}, err
	}
	e, ok, err := db.location(anchor, seq)
	if err != nil {
		return segment.Record{}, err
	}
	if !ok {
		return segment.Record{}, errs.New(errs.CodeDependencyMissing, "anchor %q has no record %d", anchor, seq)
	}
	return db.readFrame(ctx, anchor, seq, e)
}

// Log returns the anchor's records with from <= seq <= to, in seq order. A to
// of 0 means through the last record; a from past the last yields nothing.
//
// After a truncating compaction the records it removed are gone from the
// log but for the copies it kept (each key's last record in a removed
// segment), which Log returns like any other. A run of records that is
// gone yields, in its place, one STATE_003 *Error whose Seq is the run's
// first seq and whose message names the run and the first seq from which
// the log is held whole; a loop that goes on after it gets the records
// after the run. An anchor the database does not hold is STATE_003.
func (db *DB) Log(ctx context.Context, anchor string, from, to uint64) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		if db.filesOnly() {
			// A read-only open without the index.
			db.fileLog(ctx, anchor, from, to, func(rec segment.Record, err error) bool {
				if err != nil {
					return yield(Record{}, err)
				}
				return yield(newRecord(&rec), nil)
			})
			return
		}
		if err := db.beginRead(ctx); err != nil {
			yield(Record{}, err)
			return
		}
		defer db.endRead()
		if err := segment.ValidateAnchorID(anchor); err != nil {
			yield(Record{}, err)
			return
		}
		if _, ok, err := db.anchorInfo(anchor); err != nil || !ok {
			if err == nil {
				err = errs.New(errs.CodeDependencyMissing, "anchor %q is not in the database", anchor).At(anchor, 0, "", 0)
			}
			yield(Record{}, err)
			return
		}
		fr := db.newFrameReader(anchor)
		defer fr.close()
		var gone []uint64 // the run of removed seqs not yet reported: first, last
		report := func() bool {
			if gone == nil {
				return true
			}
			e := db.goneRun(anchor, gone[0], gone[1])
			gone = nil
			return yield(Record{}, e)
		}
		stopped := false
		db.logRange(ctx, anchor, from, to, fr, keptOrGone, func(rec segment.Record, err error) bool {
			if err == nil && isGone(&rec) {
				if gone == nil {
					gone = []uint64{rec.Seq, rec.Seq}
				}
				gone[1] = rec.Seq
				return true
			}
			if !report() {
				stopped = true
				return false
			}
			if err != nil {
				stopped = !yield(Record{}, err)
				return false
			}
			stopped = !yield(newRecord(&rec), nil)
			return !stopped
		})
		if !stopped {
			report()
		}
	}
}

// goneRun is the STATE_003 of records from..to of anchor, which a
// compaction removed without keeping a copy.
func (db *DB) goneRun(anchor string, from, to uint64) *errs.Error {
	db.truncating.RLock()
	first, err := db.cutOf(anchor)
	db.truncating.RUnlock()
	held := ""
	if err == nil {
		held = fmt.Sprintf("; the log is held whole from seq %d", first)
	}
	run := fmt.Sprintf("record %d", from)
	if to > from {
		run = fmt.Sprintf("records %d..%d", from, to)
	}
	return errs.New(errs.CodeDependencyMissing, "%s of anchor %q were removed by a compaction, which keeps of a removed segment only each key's last record%s",
		run, anchor, held).At(anchor, from, "", 0)
}

// truncatedMode says what logRange yields for a record a compaction
// removed (its index row says so: frame size 0).
type truncatedMode int

const (
	// skipTruncated yields nothing for it: the log as the segments hold
	// it, starting after the cut.
	skipTruncated truncatedMode = iota
	// keptOrGone yields the copy the compaction kept, or else a record
	// that isGone: its anchor, seq, counter and hash (what the index row
	// and the stub keep), no type.
	keptOrGone
	// hashesOnly yields the isGone record for every removed one, kept or
	// not: what a merged-order root needs of it.
	hashesOnly
)

// isGone reports whether r stands for a removed record (keptOrGone,
// hashesOnly): every record has a type.
func isGone(r *segment.Record) bool { return r.Type == "" }

// logRange yields the anchor's records from..to (0: through the last)
// through fr, which the caller closes (and may reuse); mode says what it
// yields for a record a compaction removed.
func (db *DB) logRange(ctx context.Context, anchor string, from, to uint64, fr *frameReader, mode truncatedMode, yield func(segment.Record, error) bool) {
	if err := segment.ValidateAnchorID(anchor); err != nil {
		yield(segment.Record{}, err)
		return
	}
	from = max(from, 1)
	prefix := schema.AnchorPrefix(schema.TagSeq, anchor)
	upper := schema.PrefixEnd(prefix)
	if to != 0 {
		if to < from {
			return
		}
		if to < math.MaxUint64 { // to+1 would wrap to 0, below every row
			upper = schema.SeqKey(anchor, to+1)
		}
	}
	it, err := db.index.NewIter(&pebble.IterOptions{LowerBound: schema.SeqKey(anchor, from), UpperBound: upper})
	if err != nil {
		yield(segment.Record{}, errs.Wrap(errs.CodeWriteFailed, err, "index iterator"))
		return
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if err := ctx.Err(); err != nil {
			yield(segment.Record{}, err)
			return
		}
		row, _, err := decodeSeqRow(prefix, it.Key(), it.Value())
		if err != nil {
			yield(segment.Record{}, err)
			return
		}
		var rec segment.Record
		switch {
		case row.Size != 0:
			rec, err = fr.read(row.seq, row.Location)
			if mode != skipTruncated && errs.CodeOf(err) == errs.CodeDependencyMissing {
				// Truncated since the row was read, and not kept.
				rec, err = goneRecord(anchor, row), nil
			}
		case mode == skipTruncated:
			continue // truncated by compaction: the log starts after it
		case mode == hashesOnly:
			rec = goneRecord(anchor, row)
		default:
			rec, err = db.retained(anchor, row.seq, row.Hash)
			if errs.CodeOf(err) == errs.CodeDependencyMissing {
				rec, err = goneRecord(anchor, row), nil
			}
		}
		if !yield(rec, err) || err != nil {
			return
		}
	}
	if err := it.Error(); err != nil {
		yield(segment.Record{}, errs.Wrap(errs.CodeWriteFailed, err, "read index"))
	}
}

// goneRecord is the isGone record of a removed record's row.
func goneRecord(anchor string, row seqRow) segment.Record {
	return segment.Record{Anchor: anchor, Seq: row.seq, Counter: row.Counter, Hash: row.Hash}
}

// readVersionFrame reads the record of a version. A version row written by a
// rebuild from a snapshot does not know where its record is (segno 0): the
// record's own 's' row does.
func (db *DB) readVersionFrame(ctx context.Context, anchor string, counter uint64, ve *schema.Version) (segment.Record, error) {
	e := schema.Location{Segno: ve.Segno, Offset: ve.Offset, Size: ve.Size, Counter: counter, Hash: ve.Hash}
	if ve.Segno == 0 {
		row, ok, err := db.location(anchor, ve.Seq)
		if err != nil {
			return segment.Record{}, err
		}
		if !ok {
			e := errs.New(errs.CodeIndexMismatch, "anchor %q has a version of seq %d but no record row", anchor, ve.Seq)
			e.Anchor, e.Seq = anchor, ve.Seq
			return segment.Record{}, e
		}
		e = row
	}
	return db.readFrame(ctx, anchor, ve.Seq, e)
}

// retained returns a record whose segment was truncated, if compaction kept
// it (it was a key's newest version); otherwise STATE_003.
func (db *DB) retained(anchor string, seq uint64, hash segment.Hash) (segment.Record, error) {
	v, closer, err := db.index.Get(schema.KeptKey(anchor, seq))
	if errors.Is(err, pebble.ErrNotFound) {
		e := errs.New(errs.CodeDependencyMissing, "record %d of anchor %q was truncated by compaction", seq, anchor)
		e.Anchor, e.Seq = anchor, seq
		return segment.Record{}, e
	}
	if err != nil {
		return segment.Record{}, errs.Wrap(errs.CodeWriteFailed, err, "read index")
	}
	defer closer.Close()
	// The row is one frame, nothing after it (verify checks the same).
	rec, n, err := segment.ParseFrame(anchor, v)
	if err != nil || n != len(v) || rec.Seq != seq || rec.Hash != hash {
		e := errs.New(errs.CodeIndexMismatch, "the kept copy of record %d of anchor %q does not match its row", seq, anchor)
		e.Anchor, e.Seq = anchor, seq
		return segment.Record{}, e
	}
	return rec.Clone(), nil
}

// readFrame reads and checks one record. It reads the frame alone: a
// single record's neighbours are rarely wanted next (the versions of a key
// lie in many anchors and segments), and reading ahead 256 KiB for each
// made History and Get of out-of-line values cost a large read apiece.
func (db *DB) readFrame(_ context.Context, anchor string, seq uint64, e schema.Location) (segment.Record, error) {
	fr := db.newFrameReader(anchor)
	fr.readAhead = 0
	defer fr.close()
	return fr.read(seq, e)
}

// frameReader reads records of one anchor, reading ahead in large chunks so a
// Log over many records costs few system calls.
type frameReader struct {
	// readAhead is how much is read past a requested frame (default 256 KiB).
	readAhead int64

	db     *DB
	anchor string
	dir    string
	segno  uint64
	file   *cachedFile
	buf    []byte
	bufOff int64
}

const readAhead = 256 << 10

func (db *DB) newFrameReader(anchor string) *frameReader {
	return &frameReader{db: db, anchor: anchor, dir: segmentDirOf(db, anchor), readAhead: readAhead}
}

func segmentDirOf(db *DB, anchor string) string {
	return segment.AnchorDir(db.fs, db.dir, anchor)
}

func (r *frameReader) close() {
	if r.file != nil {
		r.db.files.release(r.file)
		r.file = nil
	}
}

func (r *frameReader) read(seq uint64, e schema.Location) (segment.Record, error) {
	if e.Size == 0 {
		return r.db.retained(r.anchor, seq, e.Hash)
	}
	path := r.db.fs.PathJoin(r.dir, segment.FileName(e.Segno))
	if e.Size > segment.MaxFrameSize {
		// NB: the row's size sizes the read below; a damaged row may say
		// 4 GiB, which no frame is.
		return segment.Record{}, errs.New(errs.CodeIndexMismatch, "index row of anchor %q seq %d says its frame is %d bytes; no frame is larger than %d",
			r.anchor, seq, e.Size, segment.MaxFrameSize).At(r.anchor, seq, path, e.Offset)
	}
	end := e.Offset + int64(e.Size)
	if err := r.db.ensureWritten(r.anchor, e.Segno, end); err != nil {
		return segment.Record{}, err
	}
	if r.file == nil || r.segno != e.Segno {
		r.close()
		f, err := r.db.files.acquire(path, false, false)
		if err != nil {
			if oserrorIsNotExist(err) {
				// A compaction may have truncated the segment since the
				// caller read the row: the row says so now, and the record
				// is kept (a key's last version there) or gone (STATE_003).
				if now, ok, lerr := r.db.location(r.anchor, seq); lerr == nil && ok && now.Size == 0 {
					return r.db.retained(r.anchor, seq, e.Hash)
				}
				return segment.Record{}, errs.Wrap(errs.CodeChainBroken, err, "segment of anchor %q seq %d is missing", r.anchor, seq).At(r.anchor, seq, path, e.Offset)
			}
			if fsutil.IsEntryError(err) {
				return segment.Record{}, errs.Wrap(errs.CodeChainBroken, err, "segment of anchor %q seq %d", r.anchor, seq).At(r.anchor, seq, path, e.Offset)
			}
			if isFDPressure(err) {
				return segment.Record{}, fdReadRefusal(path, err) // retryable: no descriptor now
			}
			return segment.Record{}, errs.Wrap(errs.CodeWriteFailed, err, "open %s", path)
		}
		r.file, r.segno, r.buf = f, e.Segno, r.buf[:0]
	}
	if e.Offset < r.bufOff || end > r.bufOff+int64(len(r.buf)) {
		n := max(int64(e.Size), r.readAhead)
		if cap(r.buf) < int(n) {
			r.buf = make([]byte, n)
		}
		r.buf = r.buf[:n]
		m, err := r.file.file.ReadAt(r.buf, e.Offset)
		if err != nil && m < int(e.Size) {
			r.buf = r.buf[:0]
			if m >= 0 && (errors.Is(err, errEOF) || err == nil) {
				// Segments only grow, and ensureWritten has the bytes
				// in the file: a file shorter than its index is damage.
				d := errs.New(errs.CodeChainBroken, "segment %s ends at %d inside record seq %d", path, e.Offset+int64(m), seq).At(r.anchor, seq, path, e.Offset)
				r.db.noteDamage(r.anchor, d)
				return segment.Record{}, d
			}
			return segment.Record{}, errs.Wrap(errs.CodeWriteFailed, err, "read %s", path)
		}
		r.buf, r.bufOff = r.buf[:m], e.Offset
	}
	b := r.buf[e.Offset-r.bufOff : end-r.bufOff]
	rec, n, err := segment.ParseFrame(r.anchor, b)
	if err != nil {
		var fe *segment.FrameError
		if errors.As(err, &fe) {
			fe.Offset, fe.Seq = e.Offset, seq
			if fe.Code == "" {
				fe.Code = errs.CodeHashMismatch
			}
			d := fe.AsError(r.anchor, path)
			r.db.noteDamage(r.anchor, d)
			return segment.Record{}, d
		}
		return segment.Record{}, errs.Wrap(errs.CodeIndexMismatch, err, "anchor %q seq %d", r.anchor, seq).At(r.anchor, seq, path, e.Offset)
	}
	if n != int(e.Size) || rec.Seq != seq || rec.Hash != e.Hash || rec.Counter != e.Counter {
		return segment.Record{}, errs.New(errs.CodeIndexMismatch, "index row of anchor %q seq %d disagrees with the frame at %s:%d (seq %d, %d bytes)",
			r.anchor, seq, path, e.Offset, rec.Seq, n).At(r.anchor, seq, path, e.Offset)
	}
	return rec.Clone(), nil
}

// beginRead enters the read gate and waits until every append acknowledged
// before the call is visible (awaitVisible). A nil error is paired with
// endRead. A range loop that began a read holds Close until the loop ends.
func (db *DB) beginRead(ctx context.Context) error {
	if db.filesOnly() {
		return db.ro.noIndex // a read-only open without the index (readonly.go)
	}
	if !db.reads.Enter() {
		return errClosed
	}
	if err := db.commit.awaitVisible(ctx); err != nil {
		db.reads.Leave()
		return err
	}
	return nil
}

// endRead leaves the read gate.
func (db *DB) endRead() { db.reads.Leave() }
