package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Recovery (SPEC §3) runs at Open after an unclean shutdown, and a full
// rebuild reuses its second half when the index is missing:
//
//  1. Journal replay. Every frame acknowledged since the last settle is in a
//     journal row of the index, in the same Pebble batch as its index rows.
//     Its segment bytes may have been lost (they were not fsynced): each
//     frame is compared with its place in the segment and rewritten where the
//     segment differs or ends early. A missing segment file is recreated from
//     its first frame's journal row.
//  2. Tail reconciliation. Every anchor directory on disk is compared with
//     the index. Whole, chain-linked frames past the index's end — written by
//     an append whose index batch was lost, as a NoSync append can be after a
//     process kill — are adopted: indexed as they stand. The first frame that
//     is torn or does not verify there ends the log: the tail from it is cut
//     (kept in lost+found/) and reported. Damage where the index says whole
//     records must be — a missing or unsealed older segment, a header that
//     does not check — is never repaired: it is reported and the anchor
//     becomes read-only.
//  3. Everything touched is fsynced, the adoption rows are committed, and
//     the journal is trimmed.
//
// Each step is idempotent, so a crash during recovery is recovered by
// running it again.

// RecoveryEvent is one thing recovery did or found.
type RecoveryEvent struct {
	Kind    string      `json:"kind"`
	Anchor  string      `json:"anchor,omitempty"`
	File    string      `json:"file,omitempty"`
	Offset  int64       `json:"offset,omitempty"`
	Bytes   int64       `json:"bytes,omitempty"`
	Records uint64      `json:"records,omitempty"`
	Saved   string      `json:"saved,omitempty"` // where cut bytes were kept
	Err     *errs.Error `json:"error,omitempty"`
}

// Recovery event kinds.
const (
	EventRestored = "restored_from_journal" // segment bytes rewritten from journal rows
	EventAdopted  = "adopted"               // whole records past the index's end were indexed
	EventCut      = "torn_tail_cut"         // a torn or unverifiable tail was cut
	EventDamaged  = "damaged"               // damage found; the anchor is read-only
	EventRemoved  = "torn_segment_removed"  // a segment with no whole header was removed
)

func (e RecoveryEvent) String() string {
	var b strings.Builder
	b.WriteString(e.Kind)
	if e.Anchor != "" {
		fmt.Fprintf(&b, " anchor=%q", e.Anchor)
	}
	if e.File != "" {
		fmt.Fprintf(&b, " file=%s offset=%d", e.File, e.Offset)
	}
	if e.Records > 0 {
		fmt.Fprintf(&b, " records=%d", e.Records)
	}
	if e.Bytes > 0 {
		fmt.Fprintf(&b, " bytes=%d", e.Bytes)
	}
	if e.Saved != "" {
		fmt.Fprintf(&b, " saved=%s", e.Saved)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

// RecoveryReport says what Open found and did.
type RecoveryReport struct {
	// Clean: the previous session closed cleanly; nothing was checked.
	Clean bool `json:"clean"`
	// Rebuilt: the index was missing and was rebuilt from the segments.
	Rebuilt bool            `json:"rebuilt"`
	Events  []RecoveryEvent `json:"events"`
}

// RecoveryReport returns what Open's recovery found and did.
func (db *DB) RecoveryReport() RecoveryReport {
	r := db.recovery
	r.Events = slices.Clone(r.Events)
	return r
}

// LostAndFound is the directory under the database root where recovery keeps
// the bytes it cuts.
const LostAndFound = "lost+found"

func (db *DB) event(ev RecoveryEvent) {
	db.recovery.Events = append(db.recovery.Events, ev)
}

// recover runs the three steps of recovery.
func (db *DB) recover() error {
	if err := db.replayJournal(); err != nil {
		return err
	}
	if err := db.reconcileAll(); err != nil {
		return err
	}
	return db.settleAll()
}

type journalRow struct {
	lsn uint64
	journalEntry
	rec segment.Record
}

// replayJournal is step 1.
func (db *DB) replayJournal() error {
	it, err := db.index.NewIter(&pebble.IterOptions{LowerBound: []byte{tagJourn}, UpperBound: []byte{tagJourn + 1}})
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "index iterator")
	}
	byAnchor := make(map[string][]journalRow)
	var order []string
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		je, err := decodeJournalEntry(slices.Clone(it.Value()))
		if err != nil || len(k) != 9 {
			_ = it.Close()
			return errs.Wrap(errs.CodeIndexMismatch, err, "journal row %x", k)
		}
		rec, n, err := segment.ParseFrame(je.Anchor, je.Frame)
		if err != nil || n != len(je.Frame) {
			_ = it.Close()
			return errs.Wrap(errs.CodeIndexMismatch, err, "journal row %x holds a bad frame for anchor %q", k, je.Anchor)
		}
		if _, seen := byAnchor[je.Anchor]; !seen {
			order = append(order, je.Anchor)
		}
		byAnchor[je.Anchor] = append(byAnchor[je.Anchor], journalRow{lsn: be.Uint64(k[1:]), journalEntry: je, rec: rec})
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "read journal")
	}
	for _, id := range order {
		if err := db.replayAnchor(id, byAnchor[id]); err != nil {
			return err
		}
	}
	return nil
}

func (db *DB) replayAnchor(id string, rows []journalRow) error {
	a, err := db.getAnchor(id, false)
	if err != nil {
		return err
	}
	if a == nil {
		return errs.New(errs.CodeIndexMismatch, "journal holds records of anchor %q that the index does not know; run rebuild-index", id)
	}
	for i := 1; i < len(rows); i++ {
		if rows[i].rec.Seq != rows[i-1].rec.Seq+1 {
			return errs.New(errs.CodeIndexMismatch, "journal of anchor %q jumps from seq %d to %d", id, rows[i-1].rec.Seq, rows[i].rec.Seq)
		}
	}
	for start := 0; start < len(rows); {
		end := start + 1
		for end < len(rows) && rows[end].Segno == rows[start].Segno {
			end++
		}
		sealed := end < len(rows)
		if err := db.replaySegment(a, rows[start:end], sealed); err != nil {
			var e *errs.Error
			if errors.As(err, &e) && e.Code != errs.CodeWriteFailed {
				db.markDamaged(a, e)
				return nil
			}
			return err
		}
		start = end
	}
	return nil
}

// replaySegment makes one segment hold the journal's frames at their offsets.
func (db *DB) replaySegment(a *anchor, rows []journalRow, sealed bool) error {
	segno := rows[0].Segno
	path := db.segmentPath(a, segno)
	first := rows[0]
	var want []byte
	for i, r := range rows {
		if i > 0 && r.Offset != rows[i-1].Offset+int64(len(rows[i-1].Frame)) {
			return errs.New(errs.CodeIndexMismatch, "journal frames of segment %s are not contiguous at offset %d", path, r.Offset).At(a.id, r.rec.Seq, path, r.Offset)
		}
		want = append(want, r.Frame...)
	}
	// A segment created since the last settle has its header unsettled too:
	// the journal's first frame sits right after it, and the header follows
	// from that frame, so it is checked and restored like the frames.
	base := first.Offset
	if first.Offset == int64(segment.HeaderSize(a.id)) {
		h := segment.Header{Anchor: a.id, Segno: segno, FirstSeq: first.rec.Seq, PrevHash: first.rec.PrevHash}
		want = append(segment.AppendHeader(nil, &h), want...)
		base = 0
	}
	if _, err := db.fs.Stat(path); err != nil {
		if !oserrorIsNotExist(err) {
			return errs.Wrap(errs.CodeWriteFailed, err, "stat %s", path)
		}
		if base != 0 {
			return errs.New(errs.CodeChainBroken, "segment %s is missing and held settled records before seq %d", path, first.rec.Seq).At(a.id, first.rec.Seq, path, 0)
		}
		if err := db.fs.MkdirAll(a.dir, 0o755); err != nil {
			return errs.Wrap(errs.CodeWriteFailed, err, "create %s", a.dir)
		}
		if err := db.writeWholeFile(path, want); err != nil {
			return err
		}
		fan := db.fs.PathDir(a.dir)
		db.markDirty(path, a.dir, fan, db.fs.PathDir(fan), db.fs.PathDir(db.fs.PathDir(fan)))
		db.event(RecoveryEvent{Kind: EventRestored, Anchor: a.id, File: path, Offset: 0, Bytes: int64(len(want)), Records: uint64(len(rows))})
		return nil
	}
	f, err := db.fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "open %s", path)
	}
	defer f.Close()
	got := make([]byte, len(want))
	n, err := f.ReadAt(got, base)
	if err != nil && !errors.Is(err, io.EOF) {
		return errs.Wrap(errs.CodeWriteFailed, err, "read %s", path)
	}
	got = got[:n]
	if !bytes.Equal(got, want) {
		// Rewrite from the first byte that differs, counting the frames
		// restored from there.
		at := 0
		for at < len(got) && got[at] == want[at] {
			at++
		}
		restored := uint64(0)
		for _, r := range rows {
			if r.Offset+int64(len(r.Frame)) > base+int64(at) {
				restored++
			}
		}
		if _, err := f.WriteAt(want[at:], base+int64(at)); err != nil {
			return errs.Wrap(errs.CodeWriteFailed, err, "rewrite %s", path)
		}
		db.files.forget(path)
		db.markDirty(path)
		db.event(RecoveryEvent{Kind: EventRestored, Anchor: a.id, File: path, Offset: base + int64(at), Bytes: int64(len(want) - at), Records: restored})
	}
	if sealed {
		// A later segment has journal frames, so this one was sealed — and the
		// seal fsynced — before any of them was written.
		if err := db.checkSealAfter(a, f, path, base+int64(len(want)), rows[len(rows)-1].rec); err != nil {
			return err
		}
	}
	return nil
}

func (db *DB) checkSealAfter(a *anchor, f vfs.File, path string, off int64, last segment.Record) error {
	st, err := f.Stat()
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "stat %s", path)
	}
	hb := make([]byte, min(st.Size(), int64(segment.HeaderSize(a.id))))
	if _, err := f.ReadAt(hb, 0); err != nil && !errors.Is(err, io.EOF) {
		return errs.Wrap(errs.CodeWriteFailed, err, "read %s", path)
	}
	h, _, err := segment.ParseHeader(hb)
	if err != nil {
		return errs.Wrap(errs.CodeChainBroken, err, "segment %s header", path).At(a.id, 0, path, 0)
	}
	ft := segment.Footer{LastSeq: last.Seq, Count: last.Seq - h.FirstSeq + 1, LastHash: last.Hash}
	want := segment.AppendFooter(nil, &ft, h.Checksum)
	got := make([]byte, len(want))
	if n, _ := f.ReadAt(got, off); n != len(got) || !bytes.Equal(got, want) || st.Size() != off+int64(len(want)) {
		return errs.New(errs.CodeChainBroken, "segment %s should be sealed after seq %d (a newer segment exists) but its seal is missing or wrong", path, last.Seq).At(a.id, last.Seq, path, off)
	}
	return nil
}

// writeWholeFile writes data to path through a temporary file and a rename,
// so path holds either its old content or all of data.
func (db *DB) writeWholeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := db.fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "create %s", tmp)
	}
	_, err = f.Write(slices.Clone(data)) // vfs may scribble on what it is given
	if err == nil {
		err = f.Sync()
	}
	err = errors.Join(err, f.Close())
	if err == nil {
		err = db.fs.Rename(tmp, path)
	}
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "write %s", path)
	}
	db.files.forget(path)
	return db.syncDir(db.fs.PathDir(path))
}

func (db *DB) markDirty(path string, dirs ...string) {
	db.dirtyMu.Lock()
	defer db.dirtyMu.Unlock()
	db.dirtyFiles[path] = struct{}{}
	for _, d := range dirs {
		db.dirtyDirs[d] = struct{}{}
	}
}

// markDamaged makes the anchor read-only and records why, in memory and in
// its 'a' row.
func (db *DB) markDamaged(a *anchor, e *errs.Error) {
	if e.Anchor == "" {
		e = e.At(a.id, e.Seq, e.File, e.Offset)
	}
	a.mu.Lock()
	a.damage = e
	head := a.anchorHead
	a.mu.Unlock()
	meta := anchorMeta{ActiveSegno: head.segno, ActiveFirstSeq: head.segFirst, Damage: e.Error()}
	if head.segno == 0 {
		meta.ActiveSegno, meta.ActiveFirstSeq = 1, 1
	}
	if err := db.index.Set(anchorKey(a.id), meta.encode(nil), pebble.NoSync); err != nil {
		db.opts.Logger.Errorf("anchordb: record damage of %q: %v", a.id, err)
	}
	db.event(RecoveryEvent{Kind: EventDamaged, Anchor: a.id, File: e.File, Offset: e.Offset, Err: e})
}

// settleAll makes everything recovery touched durable, then trims the whole
// journal.
func (db *DB) settleAll() error {
	db.dirtyMu.Lock()
	files := make([]string, 0, len(db.dirtyFiles))
	for f := range db.dirtyFiles {
		files = append(files, f)
	}
	dirs := make([]string, 0, len(db.dirtyDirs))
	for d := range db.dirtyDirs {
		dirs = append(dirs, d)
	}
	clear(db.dirtyFiles)
	clear(db.dirtyDirs)
	db.dirtyMu.Unlock()
	if err := db.syncPaths(files, dirs); err != nil {
		return err
	}
	last, ok, err := db.lastJournalLSN()
	if err != nil {
		return err
	}
	if ok {
		b := db.index.NewBatch()
		_ = b.DeleteRange(journalKey(0), journalKey(last+1), nil)
		_ = b.Set(metaKey(metaSettled), be.AppendUint64(nil, last), nil)
		err := b.Commit(pebble.Sync)
		_ = b.Close()
		if err != nil {
			return errs.Wrap(errs.CodeWriteFailed, err, "trim journal")
		}
		return nil
	}
	return db.index.LogData(nil, pebble.Sync)
}
