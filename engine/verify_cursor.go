package engine

import (
	"errors"
	"io"
	"slices"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
)

// seqCursor walks an anchor's 's' rows in the snapshot in step with the
// records read from the segments.
type seqCursor struct {
	c       *anchorCheck
	it      *pebble.Iterator
	prefix  int
	started bool
	valid   bool
	seq     uint64
	buf     []byte
}

// current returns the row at the cursor.
func (r *seqCursor) current() (uint64, []byte, bool) {
	if !r.started {
		r.started = true
		r.valid = r.it.First()
		r.load()
	}
	if !r.valid {
		return 0, nil, false
	}
	return r.seq, r.it.Value(), true
}

func (r *seqCursor) load() {
	for r.valid {
		k := r.it.Key()
		if len(k) == r.prefix+8 {
			r.seq = be.Uint64(k[r.prefix:])
			return
		}
		r.c.report(errs.CodeIndexMismatch, 0, "", 0, "malformed 's' row key %x", k)
		r.valid = r.it.Next()
	}
}

// skipTo moves the cursor to the first row at or after seq; rows before it
// are records no segment holds where they should be.
func (r *seqCursor) skipTo(seq uint64) {
	first, n := uint64(0), uint64(0)
	var at schema.Location
	for {
		s, row, ok := r.current()
		if !ok || s >= seq {
			break
		}
		if n == 0 {
			first = s
			at, _ = schema.DecodeLocation(row)
		}
		n++
		r.valid = r.it.Next()
		r.load()
	}
	if n > 0 {
		r.c.treeOK = false
		r.c.report(errs.CodeChainBroken, first, r.c.segPath(at.Segno), at.Offset, "%d records from seq %d are in the index but not where the segments hold them", n, first)
	}
}

// seek moves the cursor to the first row at or after seq, passing over the
// rows before it without a word (an incremental check trusts them).
func (r *seqCursor) seek(seq uint64) {
	r.started = true
	r.valid = r.it.SeekGE(schema.SeqKey(r.c.id, seq))
	r.load()
}

// peek returns the row of seq without consuming it.
func (r *seqCursor) peek(seq uint64) (schema.Location, bool) {
	r.skipTo(seq)
	s, row, ok := r.current()
	if !ok || s != seq {
		return schema.Location{}, false
	}
	e, err := schema.DecodeLocation(row)
	if err != nil {
		return schema.Location{}, false
	}
	return e, true
}

// take returns the raw row of seq and moves past it. The row is valid
// until the next call.
func (r *seqCursor) take(seq uint64) ([]byte, bool) {
	r.skipTo(seq)
	s, row, ok := r.current()
	if !ok || s != seq {
		return nil, false
	}
	r.buf = append(r.buf[:0], row...)
	r.valid = r.it.Next()
	r.load()
	return r.buf, true
}

// listSegments returns the segment files of an anchor directory by number,
// with the stubs of segments compaction removed in their place. (Where both
// are present — a truncation cut short — the segment is what is read.)
//
// A dir that is not a directory (a FIFO, whose list would block) is an
// *fsutil.EntryError; the entries are not looked at (their open is).
func listSegments(db *DB, dir string) ([]segInfo, error) {
	names, err := fsutil.List(db.fs, dir)
	if err != nil {
		if oserrorIsNotExist(err) {
			return nil, nil
		}
		if fsutil.IsEntryError(err) {
			return nil, err
		}
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "list %s", dir)
	}
	bySegno := make(map[uint64]segInfo, len(names))
	for _, n := range names {
		if segno, ok := segment.ParseFileName(n); ok {
			bySegno[segno] = segInfo{segno: segno, path: db.fs.PathJoin(dir, n)}
		}
	}
	for _, n := range names {
		if segno, ok := segment.ParseStubFileName(n); ok {
			if _, seg := bySegno[segno]; !seg {
				bySegno[segno] = segInfo{segno: segno, path: db.fs.PathJoin(dir, n), stub: true}
			}
		}
	}
	segs := make([]segInfo, 0, len(bySegno))
	for _, s := range bySegno {
		segs = append(segs, s)
	}
	slices.SortFunc(segs, func(a, b segInfo) int {
		switch {
		case a.segno < b.segno:
			return -1
		case a.segno > b.segno:
			return 1
		}
		return 0
	})
	return segs, nil
}

// readSegmentHeader reads and parses the header of a segment file.
func readSegmentHeader(db *DB, path string) (segment.Header, int64, error) {
	f, err := fsutil.Open(db.fs, path, true)
	if err != nil {
		return segment.Header{}, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return segment.Header{}, 0, err
	}
	buf := make([]byte, min(st.Size(), int64(segment.HeaderSize(string(make([]byte, segment.MaxAnchorID))))))
	if _, err := f.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return segment.Header{}, 0, err
	}
	h, _, err := segment.ParseHeader(buf)
	return h, st.Size(), err
}
