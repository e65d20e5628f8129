package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/anchordb/anchordb/internal/journal"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Recovery (SPEC §3) runs at Open after an unclean shutdown, and a full
// rebuild reuses steps 1 and 2 when the index is missing:
//
//  1. Journal replay. Every record acknowledged since the last settle is in
//     the journal files from the settle point on. Its segment bytes may have
//     been lost (they were not fsynced): each frame is compared with its place
//     in its segment and rewritten where the segment differs or ends early; a
//     segment created since the settle is recreated, header and all, and a
//     seal decided in the same group as the next segment's first record is
//     restored. A segment shorter than the journal's first frame for it is
//     damage if the index has records in the missing bytes, and otherwise a
//     hole the journal itself left (a NoSync journal file torn by a power
//     loss): the frames after it cannot link and are dropped, and reported.
//     The same holds for the segment whose seal is restored: missing, without
//     a whole header (a 0-byte file) or torn where the index vouches for
//     nothing, it lost its unsettled bytes with the journal's records of them.
//  2. Tail reconciliation. Every anchor directory on disk is compared with
//     the index. Whole, chain-linked frames past the index's end — restored
//     from the journal, or written by a NoSync append whose index rows were
//     not yet flushed — are adopted: indexed as they stand. Past the last
//     record so vouched for, the first frame that is torn or does not verify
//     ends the log: the tail from it is cut (kept in lost+found/) and
//     reported. Damage where the index says whole records must be — a missing
//     or unsealed older segment, a header that does not check — is never
//     repaired: it is reported and the anchor becomes read-only.
//  3. Everything touched is fsynced and the index flushed; Open then starts a
//     new journal file and drops the old ones.
//
// Each step is idempotent, so a crash during recovery is recovered by
// running it again.

// RecoveryEvent is one thing recovery did or found.
type RecoveryEvent struct {
	Kind    string `json:"kind"`
	Anchor  string `json:"anchor,omitempty"`
	File    string `json:"file,omitempty"`
	Offset  int64  `json:"offset,omitempty"`
	Bytes   int64  `json:"bytes,omitempty"`
	Records uint64 `json:"records,omitempty"`
	Saved   string `json:"saved,omitempty"` // where cut bytes were kept
	// Note says what happened when it is no finding (a fast rebuild that
	// fell back to a full replay for a reason of the database's own, not
	// its damage): it carries no code.
	Note string      `json:"note,omitempty"`
	Err  *errs.Error `json:"error,omitempty"`
}

// Recovery event kinds.
const (
	EventRestored = "restored_from_journal" // segment bytes rewritten from journal rows
	EventAdopted  = "adopted"               // whole records past the index's end were indexed
	EventCut      = "torn_tail_cut"         // a torn or unverifiable tail was cut
	EventDamaged  = "damaged"               // damage found; the anchor is read-only
	EventRemoved  = "torn_segment_removed"  // a segment with no whole header was removed
	// EventJournalEnd: where the journal stopped being readable (a torn last
	// block), or records past a gap that a torn journal file left.
	EventJournalEnd = "journal_end"
	// EventTruncationFinished: a compaction interrupted between a segment's
	// stub and its removal was finished (or undone); the file named is the
	// one removed.
	EventTruncationFinished = "truncation_finished"
	// EventStaleIndex: the index said it was closed cleanly but is older
	// than the journal; recovery ran anyway.
	EventStaleIndex = "stale_index"
	// EventIndexUnreadable: the index did not open (a corrupt or missing
	// file of its own); it was moved into lost+found and rebuilt.
	EventIndexUnreadable = "index_unreadable"
)

// String is the event as one line of the recovery report: its kind, then
// anchor=, file= offset=, records= and the other fields that are set.
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
	if e.Note != "" {
		fmt.Fprintf(&b, ": %s", e.Note)
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
	db.recoveryMu.Lock()
	defer db.recoveryMu.Unlock()
	r := db.recovery
	r.Events = slices.Clone(r.Events)
	return r
}

// LostAndFound is the directory under the database root where recovery keeps
// the bytes it cuts.
const LostAndFound = "lost+found"

func (db *DB) event(ev RecoveryEvent) {
	db.recoveryMu.Lock()
	db.recovery.Events = append(db.recovery.Events, ev)
	db.recoveryMu.Unlock()
}

// recover runs the three steps of recovery. stale says the index is an
// older copy (stale_index): records past its end may have been settled
// long ago, their journal dropped, so reconciliation treats what it finds
// there as a rebuild does (see scanSegment).
func (db *DB) recover(stale bool) error {
	if err := db.replayJournal(); err != nil {
		return err
	}
	if err := db.reconcileAll(stale); err != nil {
		return err
	}
	return db.settleAll()
}

// replayJournal is step 1: every frame written since the settle point is
// put back in its segment where the segment lost or mangled it.
func (db *DB) replayJournal() error {
	var settled journal.Pos
	if b, ok, err := db.metaBytes(schema.MetaSettled); err != nil {
		return err
	} else if ok {
		if settled, err = journal.DecodePos(b); err != nil {
			return errs.Wrap(errs.CodeIndexMismatch, err, "settle point")
		}
	}
	dir := db.journalDir()
	gens, err := journal.List(db.fs, dir)
	if err != nil {
		return entryErr(err, errs.CodeChainBroken, "list "+dir)
	}
	byAnchor := make(map[string][]schema.JournalRecord)
	var order []string
	// A journal file that ends torn, with later files after it, lost
	// blocks to a power loss (NoSync: nothing in it was synced, or a later
	// sync would have synced it first). The later files' blocks are
	// dropped whole: replayed, an anchor that lost records could not link
	// its later ones while another anchor of the same group kept its own,
	// and an AppendBatch would be kept in part. No segment byte or index
	// row of theirs can be durable either (segsync.go, FlushBegin).
	tornFile := ""
	dropped := map[string]int{}
	for _, gen := range gens {
		if gen < settled.Gen {
			continue
		}
		from := int64(0)
		if gen == settled.Gen {
			from = settled.Off
		}
		path := db.fs.PathJoin(dir, journal.FileName(gen))
		tail, err := journal.ReadFile(db.fs, dir, gen, from, func(b journal.Block) error {
			err := schema.DecodeJournalBlock(b.Payload, func(r schema.JournalRecord) error {
				if tornFile != "" {
					dropped[r.Anchor]++
					return nil
				}
				r.Frame = slices.Clone(r.Frame)
				rec, _, err := segment.ParseFrame(r.Anchor, r.Frame)
				if err != nil {
					return err
				}
				r.Rec = rec
				if _, seen := byAnchor[r.Anchor]; !seen {
					order = append(order, r.Anchor)
				}
				byAnchor[r.Anchor] = append(byAnchor[r.Anchor], r)
				return nil
			})
			if err != nil {
				// A block whose checksum holds but whose content does not
				// parse was written wrong: nothing to guess. Coded here, at
				// the only place that looks at content, so that every
				// other failure of ReadFile is known for an I/O error.
				e := errs.Wrap(errs.CodeIndexMismatch, err, "journal %s", journal.FileName(gen))
				e.File, e.Offset = path, b.Start.Off
				return e
			}
			return nil
		})
		if fsutil.IsEntryError(err) {
			// NB: not opened (a FIFO's open blocks): what it holds is
			// unknown, and acknowledged appends may be there alone.
			e := errs.Wrap(errs.CodeChainBroken, err, "the journal past the settle point cannot be read, and appends acknowledged since may be there alone; remove or replace it")
			e.File = path
			return e
		}
		if err != nil {
			// NB: anything ReadFile returns uncoded is a failed stat, open
			// or read: it says nothing of what the file holds, so it is
			// IO_001 (exit 2, try again), not a finding. Nothing has been
			// changed yet; a later Open reads the file again.
			if errs.CodeOf(err) != "" {
				return err
			}
			e := errs.Wrap(errs.CodeWriteFailed, err, "read journal %s", journal.FileName(gen))
			e.File = path
			return e
		}
		if tail.Reason != "" {
			// The end of what was written: a torn last block, or garbage past
			// it. Nothing there was acknowledged as durable.
			db.event(RecoveryEvent{Kind: EventJournalEnd, File: path,
				Offset: tail.Pos.Off, Bytes: tail.Unread,
				Err: errs.New(errs.CodeChainBroken, "journal ends: %s", tail.Reason)})
		}
		if (tail.Reason != "" || tail.Unread > 0) && tornFile == "" {
			tornFile = path
		}
	}
	for _, id := range slices.Sorted(maps.Keys(dropped)) {
		db.event(RecoveryEvent{Kind: EventJournalEnd, Anchor: id, Records: uint64(dropped[id]),
			Err: errs.New(errs.CodeChainBroken, "journal %s lost blocks to a power loss; the %d records of anchor %q in the journal files after it are dropped, so that no group is kept in part", tornFile, dropped[id], id)})
	}
	for _, id := range order {
		if err := db.replayAnchor(id, byAnchor[id]); err != nil {
			return err
		}
	}
	return nil
}

func (db *DB) replayAnchor(id string, rows []schema.JournalRecord) error {
	a, err := db.getAnchor(id, true)
	if err != nil {
		return err
	}
	for i := 1; i < len(rows); i++ {
		if rows[i].Rec.Seq != rows[i-1].Rec.Seq+1 {
			// Only a journal file torn by a power loss under NoSync can skip:
			// what follows the gap cannot link and is not restored.
			db.event(RecoveryEvent{Kind: EventJournalEnd, Anchor: id,
				Err: errs.New(errs.CodeChainBroken, "journal of anchor %q jumps from seq %d to %d; the records after the gap are dropped", id, rows[i-1].Rec.Seq, rows[i].Rec.Seq)})
			rows = rows[:i]
			break
		}
	}
	// The journal starting with the first record of a later segment means the
	// previous segment was sealed in that same group: its seal may be
	// missing too.
	if first := rows[0]; first.Segno > 1 && first.Offset == int64(segment.HeaderSize(id)) {
		if err := db.restorePreviousSeal(a, first.Segno-1, first.Rec.Seq-1, first.Rec.PrevHash); err != nil {
			if errors.Is(err, errJournalHole) {
				db.event(RecoveryEvent{Kind: EventJournalEnd, Anchor: id,
					Err: errs.New(errs.CodeChainBroken, "the journal lost records of anchor %q before seq %d; %d later records cannot link and are dropped",
						id, first.Rec.Seq, len(rows))})
				return nil
			}
			var e *errs.Error
			if errors.As(err, &e) && e.Code != errs.CodeWriteFailed {
				db.markDamaged(a, e)
				return nil
			}
			return err
		}
	}
	for start := 0; start < len(rows); {
		end := start + 1
		for end < len(rows) && rows[end].Segno == rows[start].Segno {
			end++
		}
		sealed := end < len(rows)
		if err := db.replaySegment(a, rows[start:end], sealed); err != nil {
			if errors.Is(err, errJournalHole) {
				db.event(RecoveryEvent{Kind: EventJournalEnd, Anchor: id,
					Err: errs.New(errs.CodeChainBroken, "the journal lost records of anchor %q before seq %d; %d later records cannot link and are dropped",
						id, rows[start].Rec.Seq, len(rows)-start)})
				return nil
			}
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
func (db *DB) replaySegment(a *anchor, rows []schema.JournalRecord, sealed bool) error {
	segno := rows[0].Segno
	path := db.segmentPath(a, segno)
	first := rows[0]
	var want []byte
	for i, r := range rows {
		if i > 0 && r.Offset != rows[i-1].Offset+int64(len(rows[i-1].Frame)) {
			return errs.New(errs.CodeIndexMismatch, "journal frames of segment %s are not contiguous at offset %d", path, r.Offset).At(a.id, r.Rec.Seq, path, r.Offset)
		}
		want = append(want, r.Frame...)
	}
	// A segment created since the last settle has its header unsettled too:
	// the journal's first frame sits right after it, and the header follows
	// from that frame, so it is checked and restored like the frames.
	base := first.Offset
	if first.Offset == int64(segment.HeaderSize(a.id)) {
		h := segment.Header{Anchor: a.id, Segno: segno, FirstSeq: first.Rec.Seq, PrevHash: first.Rec.PrevHash}
		want = append(segment.AppendHeader(nil, &h), want...)
		base = 0
	}
	// NB: Stat first: OpenReadWrite would create a missing segment, and
	// must not open a FIFO (a write to one goes nowhere the log keeps).
	if _, err := fsutil.Regular(db.fs, path, false); err != nil {
		if !oserrorIsNotExist(err) {
			return entryErr(err, errs.CodeChainBroken, "stat "+path)
		}
		if base != 0 {
			return db.journalHole(a, segno, path, 0, first)
		}
		if err := db.fs.MkdirAll(a.dir, 0o755); err != nil {
			return errs.Wrap(errs.CodeWriteFailed, err, "create %s", a.dir)
		}
		if sealed {
			// The journal has frames of a later segment, so this one was
			// sealed; its seal follows from its header and last record.
			h, _, err := segment.ParseHeader(want)
			if err != nil {
				return errs.Wrap(errs.CodeIndexMismatch, err, "rebuild header of %s", path)
			}
			last := rows[len(rows)-1].Rec
			ft := segment.Footer{LastSeq: last.Seq, Count: last.Seq - h.FirstSeq + 1, LastHash: last.Hash}
			want = segment.AppendFooter(want, &ft, h.Checksum)
		}
		if err := db.writeWholeFile(path, want); err != nil {
			return err
		}
		db.markDirty(path, db.segmentDirs(a)...)
		db.event(RecoveryEvent{Kind: EventRestored, Anchor: a.id, File: path, Offset: 0, Bytes: int64(len(want)), Records: uint64(len(rows))})
		return nil
	}
	f, err := db.fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "open %s", path)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "stat %s", path)
	} else if st.Size() < base {
		return db.journalHole(a, segno, path, st.Size(), first)
	}
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
		if err := db.restoreSealAfter(a, f, path, base+int64(len(want)), rows[len(rows)-1].Rec); err != nil {
			return err
		}
	}
	// Bytes found intact are not necessarily durable: after a process kill
	// they may be in the page cache only, and so may the directory entry
	// of a segment created since the last settle (and its anchor's, for a
	// new anchor). The journal that holds them is dropped once recovery
	// settles, so the settle must fsync them.
	if base == 0 {
		db.markDirty(path, db.segmentDirs(a)...)
	} else {
		db.markDirty(path)
	}
	return nil
}

// segmentDirs are the directories whose entries lead to the anchor's
// segments: its own directory, the fan-out directory, anchors/ and the
// database root.
func (db *DB) segmentDirs(a *anchor) []string {
	fan := db.fs.PathDir(a.dir)
	anchors := db.fs.PathDir(fan)
	return []string{a.dir, fan, anchors, db.fs.PathDir(anchors)}
}

// errJournalHole: the journal's records of an anchor do not start where its
// segment ends, and the index vouches for nothing in between.
var errJournalHole = errors.New("journal hole")

// journalHole decides what a segment that ends before the journal's first
// frame for it means. If the index claims records in the missing bytes, they
// were settled and are lost: damage. Otherwise the journal itself lost the
// records in between — a journal file of a NoSync session torn by a power
// loss — and the frames after the hole cannot link: they are dropped.
func (db *DB) journalHole(a *anchor, segno uint64, path string, size int64, first schema.JournalRecord) error {
	st := a.snapshot()
	claimed := int64(0)
	switch {
	case st.segno == segno:
		claimed = st.segSize
	case st.segno > segno:
		claimed = first.Offset // the index knows a later segment: this one was sealed
	}
	if claimed > size {
		return errs.New(errs.CodeChainBroken, "segment %s is %d bytes but the index has records in it up to byte %d", path, size, claimed).At(a.id, first.Rec.Seq, path, size)
	}
	return errJournalHole
}

// restorePreviousSeal finds the end of record lastSeq (hash lastHash) in
// segment segno and restores the seal after it.
//
// The segment is whole up to lastSeq only where it is settled. Its records
// past the settle point were in the journal just before the ones being
// replayed, and a NoSync journal file torn by a power loss can lose them while
// a later journal file keeps the seal and the next segment's first record;
// the segment's own unsynced bytes (even its header, if it was created since
// the settle) can go with them. What the index does not vouch for is then a
// hole the journal left, never damage (see segmentHole and sealHole).
func (db *DB) restorePreviousSeal(a *anchor, segno, lastSeq uint64, lastHash segment.Hash) error {
	path := db.segmentPath(a, segno)
	// Stat first: OpenReadWrite would create a missing segment, and must
	// not open a FIFO.
	if _, err := fsutil.Regular(db.fs, path, false); err != nil {
		if oserrorIsNotExist(err) {
			e := errs.New(errs.CodeChainBroken, "segment %s is missing; the index has records in it or after it", path)
			e.File = path
			return db.segmentHole(a, segno, e)
		}
		return entryErr(err, errs.CodeChainBroken, "stat "+path)
	}
	f, err := db.fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "open %s", path)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "stat %s", path)
	}
	sc, err := segment.NewScanner(f, st.Size())
	if err != nil {
		var fe *segment.FrameError
		if errors.As(err, &fe) && fe.Kind == segment.Torn {
			// No whole header (a 0-byte file whose directory entry outlived
			// its data): the segment holds no record.
			return db.segmentHole(a, segno, fe.AsError(a.id, path))
		}
		return frameErr(a.id, path, err)
	}
	for sc.NextSeq() <= lastSeq {
		if _, err := sc.Next(); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			var fe *segment.FrameError
			if errors.As(err, &fe) && a.snapshot().head < sc.NextSeq() {
				// A frame no index row vouches for: the segment's unsettled
				// tail, torn by the crash that tore the journal.
				return errJournalHole
			}
			return frameErr(a.id, path, err)
		}
	}
	if sc.NextSeq() <= lastSeq {
		return db.sealHole(a, path, sc.NextSeq()-1, lastSeq)
	}
	if sc.NextSeq() != lastSeq+1 || sc.HeadHash() != lastHash {
		e := errs.New(errs.CodeChainBroken, "segment %s ends at seq %d; the next segment starts after seq %d", path, sc.NextSeq()-1, lastSeq)
		e.File, e.Seq, e.Offset = path, lastSeq, sc.Offset()
		return e
	}
	last := segment.Record{Seq: lastSeq, Hash: lastHash}
	if err := db.restoreSealAfter(a, f, path, sc.Offset(), last); err != nil {
		return err
	}
	// A seal found intact may not have reached the disk: a kill before its
	// fsync leaves it in the page cache (see replaySegment). The segment
	// itself is older than the settle point, its directory entry settled.
	db.markDirty(path)
	return nil
}

// segmentHole decides what a previous segment that is missing or has no
// whole header means: it holds no record. If the index has records in it, or
// has moved past it to a later segment, they were settled and are lost:
// damage. Otherwise the segment was created since the last settle and a power
// loss took its bytes along with the journal's records of it (NoSync): a hole
// the journal left, whose later frames cannot link. Reconciliation then
// removes a headerless newest segment as a torn creation.
func (db *DB) segmentHole(a *anchor, segno uint64, damage *errs.Error) error {
	if st := a.snapshot(); st.segno > segno || (st.segno == segno && st.segSize > 0) {
		return damage
	}
	return errJournalHole
}

// sealHole decides what a previous segment that ends (at seq have) before
// the record the journal's next segment links to (seq want) means: damage
// if the index vouches for the missing records, else a hole the journal
// itself left (NoSync, power loss), whose later frames cannot link.
func (db *DB) sealHole(a *anchor, path string, have, want uint64) error {
	if a.snapshot().head > have {
		e := errs.New(errs.CodeChainBroken, "segment %s ends at seq %d; the index has records up to seq %d", path, have, a.snapshot().head)
		e.File, e.Seq = path, have+1
		return e
	}
	return errJournalHole
}

// restoreSealAfter makes sure the segment ends with its seal right after its
// last journal frame. The journal holds frames of the next segment, so the
// seal was decided in the same commit group; the applier writes (and
// fsyncs) it only after the group's journal block is durable, so a crash can
// leave it unwritten or torn. It follows from the header and the last record,
// so it is restored like the frames.
func (db *DB) restoreSealAfter(a *anchor, f vfs.File, path string, off int64, last segment.Record) error {
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
	n, _ := f.ReadAt(got, off)
	end := off + int64(len(want))
	if n == len(got) && bytes.Equal(got, want) && st.Size() == end {
		return nil
	}
	if _, err := f.WriteAt(want, off); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "write the seal of %s", path)
	}
	if st.Size() > end {
		// Whatever followed was never part of the log: the segment ends here.
		if err := db.truncateFile(path, end); err != nil {
			return err
		}
	}
	db.files.forget(path)
	db.markDirty(path)
	db.event(RecoveryEvent{Kind: EventRestored, Anchor: a.id, File: path, Offset: off, Bytes: int64(len(want))})
	return nil
}

// writeWholeFile writes data to path through a temporary file and a rename,
// so path holds either its old content or all of data.
func (db *DB) writeWholeFile(path string, data []byte) error {
	return db.replaceFile(path, func(f vfs.File) error {
		_, err := f.Write(slices.Clone(data)) // vfs may scribble on what it is given
		return err
	})
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
	b := db.index.NewBatch()
	setDamageRows(b, a, head)
	if err := b.Commit(pebble.NoSync); err != nil {
		db.opts.Logger.Errorf("record damage of %q: %v", a.id, err)
	}
	_ = b.Close()
	db.event(RecoveryEvent{Kind: EventDamaged, Anchor: a.id, File: e.File, Offset: e.Offset, Err: e})
}

// settleAll makes everything recovery touched durable: the segments it
// rewrote or adopted, then the index rows it wrote. The journal is restarted
// afterwards by startJournal, which drops the old files.
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
	return db.flushIndex()
}
