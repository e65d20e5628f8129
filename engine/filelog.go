package engine

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/anchordb/anchordb/internal/journal"
	"github.com/anchordb/anchordb/segment"
)

// Reading a log from its files alone.
//
// A read-only open that cannot use the index (another process has the
// database open for writing and holds it, or only a writer's recovery would
// bring it up to date) reads each anchor's log from its segment files, its
// stubs and the journal, as docs/FORMAT.md §4.5 and §5.4 describe them,
// holding no lock, while a writer may be appending, sealing, settling or
// truncating. What it reads is a consistent prefix of each anchor: whole
// records, each hashing to its hash and linked to the one before from the
// genesis hash on. The writer's order makes that safe (docs/RELIABILITY.md,
// "Reading without the write lock"):
//
//   - Segment and journal files only grow while they are written (a
//     recovery's rewrite of a segment goes through a rename), so what a read
//     finds below the size it saw stays as it is; a frame or header whose
//     write is under way reads as a torn end.
//   - A segment is sealed, its seal written and fsynced, before its successor
//     is created, so a segment the listing shows a successor of is whole:
//     anything wrong in it is damage. The newest segment may be in the middle
//     of a write, or hold what a crash left for the next open's recovery to
//     settle: what does not read there ends the prefix and is reported as a
//     tail (FileTail), never as a finding.
//   - A truncation writes a segment's stub before it removes the segment: a
//     listed segment found missing is read from its stub.
//   - The journal holds, in commit order, every frame written since the last
//     settle, and a settle deletes a journal file only after the segments
//     hold its frames. The journal is read first, the segments after it; a
//     journal frame extends an anchor's prefix only where it continues it
//     (the next seq, linked to the head), so a frame a settle wrote into the
//     segments meanwhile is read from there, and a journal file of an earlier
//     session that recovery had reason to drop (frames after a hole) links to
//     nothing and is passed over.

// journalView is every frame the journal files hold, read once per
// operation, by anchor, in journal order.
type journalView struct {
	byAnchor map[string][]journalEntry
	bad      []Finding // blocks whose checksum holds but whose content does not parse
}

// journalEntry is one frame of the journal, as a record.
type journalEntry struct {
	rec    segment.Record
	gen    uint64
	file   string
	offset int64 // of its block
}

// readJournal reads every journal file as it stands, from its first block
// to the first that does not verify. A file a settle deleted before it was
// opened is passed over: the segments hold its frames. With only set, it
// keeps the frames of that anchor alone.
func (db *DB) readJournal(ctx context.Context, only ...string) (*journalView, error) {
	jv := &journalView{byAnchor: make(map[string][]journalEntry)}
	dir := db.journalDir()
	gens, err := journal.List(db.fs, dir)
	if err != nil {
		if fsutil.IsEntryError(err) {
			return jv, nil // not a directory: verify reports it (foreignJournalEntries)
		}
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "list %s", dir)
	}
	for _, gen := range gens {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		path := db.fs.PathJoin(dir, journal.FileName(gen))
		_, err := journal.ReadFile(db.fs, dir, gen, 0, func(b journal.Block) error {
			var recs []journalEntry
			err := schema.DecodeJournalBlock(b.Payload, func(r schema.JournalRecord) error {
				if len(only) == 0 || r.Anchor == only[0] {
					recs = append(recs, journalEntry{rec: r.Rec.Clone(), gen: gen, file: path, offset: b.Start.Off})
				}
				return nil
			})
			if err != nil {
				// Its checksum holds: the block was written so. Its frames
				// are not taken; verify reports it.
				jv.bad = append(jv.bad, Finding{Code: errs.CodeIndexMismatch, File: path, Offset: b.Start.Off,
					Message: fmt.Sprintf("journal block's checksum holds but its records do not parse: %v", err)})
				return nil
			}
			for _, e := range recs {
				jv.byAnchor[e.rec.Anchor] = append(jv.byAnchor[e.rec.Anchor], e)
			}
			return nil
		})
		switch {
		case err == nil:
		case fsutil.IsEntryError(err), oserrorIsNotExist(err):
			// Deleted by a settle since it was listed (its frames are in
			// the segments now), or not a file: verify reports such an
			// entry (foreignJournalEntries).
		default:
			return nil, errs.Wrap(errs.CodeWriteFailed, err, "read journal %s", path)
		}
	}
	return jv, nil
}

// FileTail is what ends an anchor's log, read from the files, before the
// end of its newest segment: bytes that do not read as the next record.
// With a writer at work it is a write in progress; after a crash, what the
// next open's recovery cuts (or restores from the journal). A check from
// the files cannot tell those from damage to the newest segment's last
// records, so it reports the bytes here and not as a finding: a check with
// the index tells them apart.
type FileTail struct {
	Anchor  string `json:"anchor"`
	Seq     uint64 `json:"seq"`    // the seq the bytes would hold
	File    string `json:"file"`   // the segment
	Offset  int64  `json:"offset"` // where the bytes begin
	Bytes   int64  `json:"bytes"`  // how many, to the end of the file
	Message string `json:"message"`
}

// fileEntry is one record of an anchor's log as its files hold it.
type fileEntry struct {
	seq     uint64
	hash    segment.Hash
	counter uint64
	rec     *segment.Record // nil when a stub keeps only the record's hash
	file    string          // the segment, stub or journal file it was read from
	offset  int64
	stub    bool // it was read from a stub
}

// errStopWalk ends a walk early, with no error.
var errStopWalk = errors.New("stop")

// fileWalk reads one anchor's log from its files, in seq order.
type fileWalk struct {
	db      *DB
	id      string
	dir     string
	journal []journalEntry
	// visit sees every record of the consistent prefix, in seq order; its
	// error (errStopWalk: none) ends the walk.
	visit func(fileEntry) error
	// finding reports damage; the walk goes on after it where it can, but
	// the prefix ends at the first.
	finding func(Finding)

	// What the walk found.
	size     uint64       // records in the prefix
	head     segment.Hash // the hash of the last of them (the genesis hash when none)
	intact   bool         // the prefix has not been broken by a finding
	tail     *FileTail
	files    int   // segment and stub files read
	bytes    int64 // of them
	findings int

	next   uint64
	prev   segment.Hash
	lastCt uint64
}

func (db *DB) newFileWalk(id string, jv *journalView) *fileWalk {
	w := &fileWalk{db: db, id: id, dir: segment.AnchorDir(db.fs, db.dir, id), intact: true}
	if jv != nil {
		w.journal = jv.byAnchor[id]
	}
	w.next, w.prev, w.head = 1, segment.GenesisHash(id), segment.GenesisHash(id)
	return w
}

// report records a finding about the anchor's log; the prefix ends there.
func (w *fileWalk) report(code errs.Code, seq uint64, file string, offset int64, format string, args ...any) {
	w.intact = false
	w.findings++
	if w.finding != nil {
		w.finding(Finding{Code: code, Reason: code.Reason(), Anchor: w.id, Seq: seq, File: file, Offset: offset, Message: fmt.Sprintf(format, args...)})
	}
}

// entry passes one record on: to visit while the prefix holds.
func (w *fileWalk) entry(e fileEntry) error {
	if e.seq > 1 && e.counter <= w.lastCt && w.intact {
		w.report(errs.CodeChainBroken, e.seq, e.file, e.offset, "counter %d is not above the previous record's %d", e.counter, w.lastCt)
	}
	w.lastCt = e.counter
	w.next, w.prev = e.seq+1, e.hash
	if !w.intact {
		return nil
	}
	w.size, w.head = e.seq, e.hash
	if w.visit != nil {
		return w.visit(e)
	}
	return nil
}

// run walks the anchor's segments and stubs, then the journal's frames
// past them.
func (w *fileWalk) run(ctx context.Context) error {
	db := w.db
	segs, err := listSegments(db, w.dir)
	if e := foreignOf(err); e != nil {
		w.report(errs.CodeChainBroken, 0, e.File, 0, "the anchor's directory %s", e.Message)
		return nil
	}
	if err != nil {
		return err
	}
	want := uint64(1)
	for i, s := range segs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if s.segno != want {
			for m := want; m < s.segno; m++ {
				w.report(errs.CodeChainBroken, 0, db.fs.PathJoin(w.dir, segment.FileName(m)), 0, "segment %d is missing (the directory has %d next)", m, s.segno)
			}
		}
		want = s.segno + 1
		newest := i == len(segs)-1
		var err error
		if s.stub {
			err = w.stub(s)
		} else {
			err = w.segment(s, newest)
		}
		if errors.Is(err, errStopWalk) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return w.journalTail(ctx)
}

// segment reads one segment file; a listed one found removed is read from
// its stub (a truncation removes the segment after writing the stub).
func (w *fileWalk) segment(s segInfo, newest bool) error {
	db := w.db
	f, err := fsutil.Open(db.fs, s.path, true)
	if err != nil {
		var ee *fsutil.EntryError
		if errors.As(err, &ee) && ee.What == fsutil.Dangling {
			stub := db.fs.PathJoin(w.dir, segment.StubFileName(s.segno))
			if _, serr := fsutil.Regular(db.fs, stub, false); serr == nil {
				return w.stub(segInfo{segno: s.segno, path: stub, stub: true})
			}
			w.report(errs.CodeChainBroken, w.next, s.path, 0, "segment %s disappeared, and no stub took its place", s.path)
			return nil
		}
		if e := foreignOf(err); e != nil {
			w.report(errs.CodeChainBroken, w.next, s.path, 0, "segment %s", e.Message)
			return nil
		}
		return errs.Wrap(errs.CodeWriteFailed, err, "open %s", s.path)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "stat %s", s.path)
	}
	size := st.Size()
	w.files++
	w.bytes += size
	sc, err := segment.NewScanner(f, size)
	if err != nil {
		var fe *segment.FrameError
		if !errors.As(err, &fe) {
			return errs.Wrap(errs.CodeWriteFailed, err, "read %s", s.path)
		}
		if newest {
			w.endTail(s.path, 0, size, "segment header: "+fe.Msg)
			return nil
		}
		code := fe.Code
		if fe.Kind == segment.Torn || code == "" {
			code = errs.CodeChainBroken
		}
		w.report(code, w.next, s.path, 0, "segment header: %s", fe.Msg)
		return nil
	}
	h := sc.Header
	switch {
	case h.Anchor != w.id:
		w.report(errs.CodeChainBroken, w.next, s.path, 0, "segment header names anchor %q", h.Anchor)
		return nil
	case h.Segno != s.segno:
		w.report(errs.CodeChainBroken, w.next, s.path, 0, "segment file %d has the header of segment %d", s.segno, h.Segno)
		return nil
	case h.FirstSeq != w.next || h.PrevHash != w.prev:
		if w.intact {
			w.report(errs.CodeChainBroken, w.next, s.path, 0, "segment header (first seq %d, prev hash %s) does not continue the chain at seq %d (%s)",
				h.FirstSeq, h.PrevHash, w.next, w.prev)
		}
		w.next, w.prev = h.FirstSeq, h.PrevHash
	}
	for {
		fr, err := sc.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var fe *segment.FrameError
			if !errors.As(err, &fe) {
				return errs.Wrap(errs.CodeWriteFailed, err, "read %s", s.path)
			}
			if newest {
				w.endTail(s.path, fe.Offset, size, fe.Msg)
				return nil
			}
			code := fe.Code
			if fe.Kind == segment.Torn || code == "" {
				code = errs.CodeChainBroken
			}
			w.report(code, sc.NextSeq(), s.path, fe.Offset, "%s", fe.Msg)
			return nil
		}
		rec := fr.Record.Clone()
		if err := w.entry(fileEntry{seq: rec.Seq, hash: rec.Hash, counter: rec.Counter, rec: &rec, file: s.path, offset: fr.Offset}); err != nil {
			return err
		}
	}
	if sc.Footer() == nil && !newest {
		w.report(errs.CodeChainBroken, w.next, s.path, sc.Offset(), "segment %d is not sealed, yet segment %d follows", s.segno, s.segno+1)
	}
	return nil
}

// endTail ends the prefix in the newest segment at offset: what follows is
// in flight or for recovery, not a finding (FileTail).
func (w *fileWalk) endTail(path string, offset, size int64, msg string) {
	if size > offset {
		w.tail = &FileTail{Anchor: w.id, Seq: w.next, File: path, Offset: offset, Bytes: size - offset, Message: msg}
	}
}

// stub reads a stub in place of the segment a truncation removed.
func (w *fileWalk) stub(s segInfo) error {
	data, err := readWholeFile(w.db.fs, s.path)
	if err != nil {
		if e := foreignOf(err); e != nil {
			w.report(errs.CodeChainBroken, w.next, s.path, 0, "segment stub %s", e.Message)
			return nil
		}
		if oserrorIsNotExist(err) {
			w.report(errs.CodeChainBroken, w.next, s.path, 0, "segment stub %s disappeared", s.path)
			return nil
		}
		return errs.Wrap(errs.CodeWriteFailed, err, "read %s", s.path)
	}
	w.files++
	w.bytes += int64(len(data))
	st, err := segment.ParseStub(data)
	if err == nil && (st.Anchor != w.id || st.Segno != s.segno) {
		err = errs.New(errs.CodeChainBroken, "the stub names anchor %q segment %d", st.Anchor, st.Segno)
	}
	if err != nil {
		code := errs.CodeOf(err)
		if code == "" {
			code = errs.CodeHashMismatch
		}
		w.report(code, w.next, s.path, 0, "segment stub: %s", errs.Message(err))
		return nil
	}
	if st.FirstSeq != w.next || st.PrevHash != w.prev {
		if w.intact {
			w.report(errs.CodeChainBroken, w.next, s.path, 0, "segment stub (first seq %d, prev hash %s) does not continue the chain at seq %d (%s)",
				st.FirstSeq, st.PrevHash, w.next, w.prev)
		}
		w.next, w.prev = st.FirstSeq, st.PrevHash
	}
	kept := make(map[uint64]*segment.Record, len(st.Kept))
	for i := range st.Kept {
		kept[st.Kept[i].Seq] = &st.Kept[i]
	}
	for i, h := range st.Hashes {
		seq := st.FirstSeq + uint64(i)
		e := fileEntry{seq: seq, hash: h, counter: st.Counters[i], file: s.path, stub: true}
		if r := kept[seq]; r != nil {
			c := r.Clone()
			e.rec = &c
		}
		if err := w.entry(e); err != nil {
			return err
		}
	}
	return nil
}

// journalTail extends the prefix with the journal's frames that continue
// it: the next seq, linked to the head. Others are the segments' already,
// or of an earlier session's journal that recovery dropped. Of two frames
// with one seq, the later one written counts: the engine writes a seq once
// in a session, and again only after recovery dropped the first (a journal
// file can outlive that recovery when a crash comes before its removal;
// the next settle removes it).
func (w *fileWalk) journalTail(ctx context.Context) error {
	if !w.intact || len(w.journal) == 0 {
		return nil
	}
	latest := make(map[uint64]*journalEntry, len(w.journal))
	for i := range w.journal {
		j := &w.journal[i]
		if j.rec.Seq < w.next {
			continue
		}
		if l := latest[j.rec.Seq]; l == nil || l.gen < j.gen || (l.gen == j.gen && l.offset < j.offset) {
			latest[j.rec.Seq] = j
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		j := latest[w.next]
		if j == nil || j.rec.PrevHash != w.prev {
			return nil
		}
		rec := j.rec
		if err := w.entry(fileEntry{seq: rec.Seq, hash: rec.Hash, counter: rec.Counter, rec: &rec, file: j.file, offset: j.offset}); err != nil {
			if errors.Is(err, errStopWalk) {
				return nil
			}
			return err
		}
		if w.tail != nil && w.next > w.tail.Seq {
			w.tail = nil // the journal holds what the segment does not yet
		}
	}
}
