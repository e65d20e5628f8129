package engine

import (
	"context"
	"errors"
	"iter"
	"math"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
)

// Version is one version of a key: its value and the receipt of the record
// that wrote it.
type Version struct {
	Key     []byte
	Value   []byte
	Deleted bool
	Time    int64 // the record time, Unix nanoseconds
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
	lower := keyPrefix(key)
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
	key, counter, anchor, err := parseVersionKey(k)
	if err != nil {
		return Version{}, errs.Wrap(errs.CodeIndexMismatch, err, "read index")
	}
	ve, err := decodeVersionEntry(v)
	if err != nil {
		return Version{}, errs.Wrap(errs.CodeIndexMismatch, err, "key %q", key)
	}
	out := Version{Key: key, Deleted: ve.Type == verDelete, Time: ve.Time,
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
// records that wrote them.
func (db *DB) History(ctx context.Context, key []byte) iter.Seq2[segment.Record, error] {
	return func(yield func(segment.Record, error) bool) {
		if err := db.beginRead(ctx); err != nil {
			yield(segment.Record{}, err)
			return
		}
		defer db.endRead()
		it, err := db.versionRows(db.index, key)
		if err != nil {
			yield(segment.Record{}, err)
			return
		}
		defer it.Close()
		// Versions are stored newest first; history reads them backwards.
		for ok := it.Last(); ok; ok = it.Prev() {
			if err := ctx.Err(); err != nil {
				yield(segment.Record{}, err)
				return
			}
			_, counter, anchor, err := parseVersionKey(it.Key())
			if err != nil {
				yield(segment.Record{}, errs.Wrap(errs.CodeIndexMismatch, err, "read index"))
				return
			}
			ve, err := decodeVersionEntry(it.Value())
			if err != nil {
				yield(segment.Record{}, errs.Wrap(errs.CodeIndexMismatch, err, "key %q", key))
				return
			}
			rec, err := db.readVersionFrame(ctx, anchor, counter, &ve)
			if err != nil && ve.Size == 0 && errors.Is(err, ErrDependencyMissing) {
				// The record was truncated and only its version survives (a
				// rebuild restored it from a snapshot): give what the index
				// holds. PrevHash and IdempotencyKey are unknown (zero).
				rec, err = segment.Record{Anchor: anchor, Seq: ve.Seq, Counter: counter, Time: ve.Time,
					Type: segment.TypePut, Key: append([]byte(nil), key...), Value: append([]byte(nil), ve.Value...), Hash: ve.Hash}, nil
				if ve.Type == verDelete {
					rec.Type, rec.Value = segment.TypeDelete, nil
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
	lower, upper := scanBounds(prefix)
	return db.scan(ctx, lower, upper)
}

// ScanRange returns the live keys in [start, end) in byte order; a nil end
// means no upper bound.
func (db *DB) ScanRange(ctx context.Context, start, end []byte) iter.Seq2[Version, error] {
	lower := appendEscaped([]byte{tagKey}, start)
	upper := []byte{tagKey + 1}
	if end != nil {
		upper = appendEscaped([]byte{tagKey}, end)
	}
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
			ok = nextKey(it, appendPastVersions(nil, v.Key))
		}
		if err := it.Error(); err != nil {
			yield(Version{}, errs.Wrap(errs.CodeWriteFailed, err, "read index"))
		}
	}
}

// Record returns record seq of the anchor, read from its segment and checked
// against its hash.
func (db *DB) Record(ctx context.Context, anchor string, seq uint64) (segment.Record, error) {
	if db.filesOnly() {
		return db.fileRecord(ctx, anchor, seq) // a read-only open without the index
	}
	if err := db.beginRead(ctx); err != nil {
		return segment.Record{}, err
	}
	defer db.endRead()
	// An illegal id is bad input, not a record that is missing (yet).
	if err := segment.ValidateAnchorID(anchor); err != nil {
		return segment.Record{}, err
	}
	e, ok, err := db.seqEntry(anchor, seq)
	if err != nil {
		return segment.Record{}, err
	}
	if !ok {
		return segment.Record{}, errs.New(errs.CodeDependencyMissing, "anchor %q has no record %d", anchor, seq)
	}
	return db.readFrame(ctx, anchor, seq, e)
}

// Log returns the anchor's records with from <= seq <= to, in seq order. A to
// of 0 means through the last record.
func (db *DB) Log(ctx context.Context, anchor string, from, to uint64) iter.Seq2[segment.Record, error] {
	return func(yield func(segment.Record, error) bool) {
		if db.filesOnly() {
			db.fileLog(ctx, anchor, from, to, yield) // a read-only open without the index
			return
		}
		if err := db.beginRead(ctx); err != nil {
			yield(segment.Record{}, err)
			return
		}
		defer db.endRead()
		fr := db.newFrameReader(anchor)
		defer fr.close()
		db.logRange(ctx, anchor, from, to, fr, yield)
	}
}

// logRange yields the anchor's records from..to (0: through the last)
// through fr, which the caller closes (and may reuse).
func (db *DB) logRange(ctx context.Context, anchor string, from, to uint64, fr *frameReader, yield func(segment.Record, error) bool) {
	if err := segment.ValidateAnchorID(anchor); err != nil {
		yield(segment.Record{}, err)
		return
	}
	from = max(from, 1)
	prefix := anchorScoped(tagSeq, anchor)
	upper := prefixEnd(prefix)
	if to != 0 {
		if to < from {
			return
		}
		if to < math.MaxUint64 { // to+1 would wrap to 0, below every row
			upper = seqKey(anchor, to+1)
		}
	}
	it, err := db.index.NewIter(&pebble.IterOptions{LowerBound: seqKey(anchor, from), UpperBound: upper})
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
		if row.Size == 0 {
			continue // truncated by compaction: the log starts after it
		}
		rec, err := fr.read(row.seq, row.seqEntry)
		if !yield(rec, err) || err != nil {
			return
		}
	}
	if err := it.Error(); err != nil {
		yield(segment.Record{}, errs.Wrap(errs.CodeWriteFailed, err, "read index"))
	}
}

// readVersionFrame reads the record of a version. A version row written by a
// rebuild from a snapshot does not know where its record is (segno 0): the
// record's own 's' row does.
func (db *DB) readVersionFrame(ctx context.Context, anchor string, counter uint64, ve *versionEntry) (segment.Record, error) {
	e := seqEntry{Segno: ve.Segno, Offset: ve.Offset, Size: ve.Size, Counter: counter, Hash: ve.Hash}
	if ve.Segno == 0 {
		row, ok, err := db.seqEntry(anchor, ve.Seq)
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
	v, closer, err := db.index.Get(retainedKey(anchor, seq))
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
func (db *DB) readFrame(_ context.Context, anchor string, seq uint64, e seqEntry) (segment.Record, error) {
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

func (r *frameReader) read(seq uint64, e seqEntry) (segment.Record, error) {
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
				if now, ok, lerr := r.db.seqEntry(r.anchor, seq); lerr == nil && ok && now.Size == 0 {
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
