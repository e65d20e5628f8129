package engine

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/transparency-dev/merkle/compact"
)

// reconciler is step 2 of recovery (see recover.go), and the whole of a
// rebuild: with an empty index every record on disk is adopted.
type reconciler struct {
	db      *DB
	batch   *pebble.Batch
	scratch []byte
	seen    map[string]bool
	// truncated records, per anchor, the last seq adopted from stubs: the
	// state below it must come from a snapshot.
	truncated map[string]uint64
	// headerless holds, by anchor path id, directories whose every segment
	// is too short for its header: no header names their anchor, so they
	// are removed only after missingAnchors has seen whether the index has
	// records of an anchor there (then it is damaged, its files kept).
	headerless map[string][]tornSegment
	// foreign holds, by anchor path id (or by fan-out name, for a fan-out
	// entry), the first entry of the anchors tree found to be neither a
	// directory where one belongs nor a regular file where a segment or a
	// stub does (a FIFO, a socket, a dangling link): such an entry is
	// never opened, and the anchor behind it is damaged (INT_002).
	foreign map[string]*errs.Error
	// fromNothing: the index is being rebuilt, or is an older copy
	// (stale_index), so no row vouches for the settled records past its
	// end, which are scanned like an unsettled tail.
	fromNothing bool
}

// reconcileAll walks every anchor directory on disk and brings the index and
// the segments into agreement.
//
// fromNothing says the index started empty (a rebuild) or ends before what
// was settled (an older copy restored): see scanSegment.
func (db *DB) reconcileAll(fromNothing bool) error {
	rc := &reconciler{db: db, batch: db.index.NewBatch(), seen: make(map[string]bool), truncated: make(map[string]uint64),
		headerless: make(map[string][]tornSegment), foreign: make(map[string]*errs.Error), fromNothing: fromNothing}
	defer func() { _ = rc.batch.Close() }()
	root := db.fs.PathJoin(db.dir, segment.AnchorsDir)
	fans, err := fsutil.List(db.fs, root)
	if err != nil && !oserrorIsNotExist(err) {
		return entryErr(err, errs.CodeChainBroken, "list "+root)
	}
	slices.Sort(fans)
	for _, fan := range fans {
		if len(fan) != 2 || !isHex(fan) {
			continue
		}
		fanDir := db.fs.PathJoin(root, fan)
		subs, err := listTreeDir(db.fs, fanDir)
		if err != nil {
			if e := foreignOf(err); e != nil {
				rc.foreign[fan] = e
				continue
			}
			return err
		}
		slices.Sort(subs)
		for _, sub := range subs {
			if len(sub) != 30 || !isHex(sub) {
				continue
			}
			if err := rc.anchorDir(db.fs.PathJoin(fanDir, sub), fan+sub); err != nil {
				return err
			}
			if err := rc.flush(false); err != nil {
				return err
			}
		}
	}
	if err := rc.missingAnchors(); err != nil {
		return err
	}
	// Foreign entries no anchor the index knows is behind: reported, kept.
	for _, k := range slices.Sorted(maps.Keys(rc.foreign)) {
		e := rc.foreign[k]
		db.event(RecoveryEvent{Kind: EventDamaged, File: e.File, Err: e})
	}
	for _, pathID := range slices.Sorted(maps.Keys(rc.headerless)) {
		dir := db.fs.PathJoin(root, pathID[:2], pathID[2:])
		if err := rc.removeTorn(dir, pathID, rc.headerless[pathID]); err != nil {
			return err
		}
	}
	if err := rc.flush(true); err != nil {
		return err
	}
	return nil
}

func isHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// flush commits the adoption rows gathered so far. Adopted segments are
// fsynced before their rows are gathered, so a row never points at bytes a
// crash could take away.
func (rc *reconciler) flush(final bool) error {
	if rc.batch.Empty() || (!final && rc.batch.Len() < 16<<20) {
		return nil
	}
	// The index has no WAL: settleAll flushes these rows once the segments
	// they point at are durable.
	if err := rc.batch.Commit(pebble.NoSync); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "commit recovered index rows")
	}
	_ = rc.batch.Close()
	rc.batch = rc.db.index.NewBatch()
	return nil
}

// segFile is one segment file found on disk.
type segFile struct {
	segno uint64
	path  string
}

func (rc *reconciler) anchorDir(dir, pathID string) error {
	db := rc.db
	names, err := listTreeDir(db.fs, dir)
	if err != nil {
		if e := foreignOf(err); e != nil {
			rc.foreign[pathID] = e
			return nil
		}
		return err
	}
	slices.Sort(names)
	var segs []segFile
	stubs := map[uint64]string{}
	var foreign *errs.Error
	for _, n := range names {
		_, isStub := segment.ParseStubFileName(n)
		_, isSeg := segment.ParseFileName(n)
		if isStub || isSeg {
			// NB: looked at before anything is opened: the open of a
			// FIFO blocks, with no context to end it.
			if _, err := fsutil.Regular(db.fs, db.fs.PathJoin(dir, n), true); err != nil {
				e := foreignOf(err)
				if e == nil {
					return ioErr(err, "stat "+db.fs.PathJoin(dir, n))
				}
				if foreign == nil {
					foreign = e
				}
				continue
			}
		}
		if segno, ok := segment.ParseStubFileName(n); ok {
			stubs[segno] = db.fs.PathJoin(dir, n)
			continue
		}
		if strings.HasSuffix(n, ".tmp") {
			// An interrupted whole-file rewrite; the original is intact.
			if err := db.fs.Remove(db.fs.PathJoin(dir, n)); err != nil {
				return errs.Wrap(errs.CodeWriteFailed, err, "remove %s", n)
			}
			continue
		}
		if segno, ok := segment.ParseFileName(n); ok {
			segs = append(segs, segFile{segno, db.fs.PathJoin(dir, n)})
		}
	}
	slices.SortFunc(segs, func(a, b segFile) int { return cmp.Compare(a.segno, b.segno) })
	if foreign != nil {
		return rc.foreignEntry(pathID, segs, foreign)
	}
	// A newest segment too short for its header holds no record: its creation
	// was torn. Journal replay has already recreated any segment the index
	// needs, so it can go — once the anchor is known not to be damaged: a
	// damaged anchor's files stay as they are for an operator.
	var torn []tornSegment
	for len(segs) > 0 {
		last := segs[len(segs)-1]
		size, hdr, herr := rc.readHeader(last.path)
		var fe *segment.FrameError
		if herr != nil && !errors.As(herr, &fe) {
			// Not a finding about the bytes: an I/O failure. Recovery must
			// stop (and run again next time), never decide on a guess.
			return herr
		}
		if herr == nil || fe.Kind != segment.Torn {
			if herr == nil && segment.AnchorPathID(hdr.Anchor) != pathID {
				return rc.orphan(last.path, fmt.Sprintf("header names anchor %q, which belongs elsewhere", hdr.Anchor))
			}
			break
		}
		torn = append(torn, tornSegment{last, size})
		segs = segs[:len(segs)-1]
	}
	if len(segs) == 0 {
		// No record anywhere in the directory, and no header to name its
		// anchor: removed after missingAnchors, unless the index has
		// records of an anchor here.
		rc.headerless[pathID] = torn
		return nil
	}
	// Name the anchor from the first segment whose header reads.
	var id string
	for _, s := range segs {
		_, h, err := rc.readHeader(s.path)
		if err == nil {
			id = h.Anchor
			break
		}
		var fe *segment.FrameError
		if !errors.As(err, &fe) {
			return err
		}
	}
	if id == "" {
		return rc.orphan(dir, "no segment header in the directory verifies")
	}
	if segment.AnchorPathID(id) != pathID {
		return rc.orphan(dir, fmt.Sprintf("headers name anchor %q, which belongs elsewhere", id))
	}
	rc.seen[id] = true
	a, err := db.getAnchor(id, true)
	if err != nil {
		return err
	}
	// The clock must pass every counter the index holds, even of an anchor
	// found damaged below (whose head then stays where the index has it):
	// the persisted clock is only as new as the last settle.
	rc.raiseClock(a.snapshot().lastCounter)
	if a.damaged() != nil {
		return nil // already reported; the files are left as they are
	}
	a.dirReady = true
	if segs, err = rc.finishTruncations(a, segs, stubs); err != nil {
		return err
	}
	if len(segs) > 0 {
		if err := rc.reconcileAnchor(a, segs, stubs); err != nil {
			return err
		}
	}
	if a.damaged() != nil {
		return nil // found damaged just now: as above
	}
	return rc.removeTorn(dir, pathID, torn)
}

// foreignEntry takes an anchor directory where a segment or stub name is
// not a regular file (e). What that entry holds is unknown, so nothing of
// the anchor is adopted, cut or removed: the regular segments' headers are
// read only to name the anchor, which becomes damaged (read-only) with e,
// its files left as they are for an operator. When no header names it,
// missingAnchors damages the anchor the index knows there, if any, with e.
func (rc *reconciler) foreignEntry(pathID string, segs []segFile, e *errs.Error) error {
	db := rc.db
	var id string
	for _, s := range segs {
		_, h, err := rc.readHeader(s.path)
		if err == nil {
			id = h.Anchor
			break
		}
		var fe *segment.FrameError
		if !errors.As(err, &fe) {
			return err
		}
	}
	if id == "" || segment.AnchorPathID(id) != pathID {
		rc.foreign[pathID] = e
		return nil
	}
	rc.seen[id] = true
	a, err := db.getAnchor(id, true)
	if err != nil {
		return err
	}
	rc.raiseClock(a.snapshot().lastCounter)
	if a.damaged() == nil {
		db.markDamaged(a, e)
	}
	return nil
}

// foreignOf returns the INT_002 error of an *fsutil.EntryError, located at
// the entry, or nil for any other error.
func foreignOf(err error) *errs.Error {
	var ee *fsutil.EntryError
	if !errors.As(err, &ee) {
		return nil
	}
	e := errs.New(errs.CodeChainBroken, "%s", ee.Error())
	e.File = ee.Path
	return e
}

// listTreeDir lists a directory of the anchors tree whose name its parent's
// listing gave: one that is not a directory (a FIFO, whose list would
// block, a file, a dangling link) is an *fsutil.EntryError; any other
// failure is IO_001.
func listTreeDir(fs vfs.FS, dir string) ([]string, error) {
	names, err := fsutil.List(fs, dir)
	switch {
	case err == nil:
		return names, nil
	case fsutil.IsEntryError(err):
		return nil, err
	case oserrorIsNotExist(err):
		return nil, &fsutil.EntryError{Path: dir, What: fsutil.Dangling}
	}
	return nil, errs.Wrap(errs.CodeWriteFailed, err, "list %s", dir)
}

// tornSegment is a newest segment whose creation a crash tore.
type tornSegment struct {
	segFile
	size int64
}

// removeTorn removes torn newest segments, newest first, keeping their bytes
// in lost+found.
func (rc *reconciler) removeTorn(dir, pathID string, torn []tornSegment) error {
	db := rc.db
	for _, t := range torn {
		saved, err := rc.saveCut(t.path, pathID, t.segno, 0, t.size)
		if err != nil {
			return err
		}
		if err := db.fs.Remove(t.path); err != nil {
			return errs.Wrap(errs.CodeWriteFailed, err, "remove %s", t.path)
		}
		db.markDirty(t.path, dir)
		db.event(RecoveryEvent{Kind: EventRemoved, File: t.path, Bytes: t.size, Saved: saved})
	}
	return nil
}

// finishTruncations settles a compaction a crash interrupted between writing
// a segment's stub and removing the segment. If the index already marks the
// segment's records truncated, the removal is finished; if not, the stub is
// dropped and the segment stays. Either way both files never remain.
func (rc *reconciler) finishTruncations(a *anchor, segs []segFile, stubs map[uint64]string) ([]segFile, error) {
	db := rc.db
	kept := segs[:0]
	for _, s := range segs {
		stub, ok := stubs[s.segno]
		if !ok {
			kept = append(kept, s)
			continue
		}
		_, h, err := rc.readHeader(s.path)
		truncated := false
		if err == nil {
			e, found, err := db.seqEntry(a.id, h.FirstSeq)
			if err != nil {
				return nil, err
			}
			truncated = found && e.Size == 0
		}
		victim := stub
		if truncated {
			victim = s.path
			db.files.forget(s.path)
		}
		if err := db.fs.Remove(victim); err != nil {
			return nil, errs.Wrap(errs.CodeWriteFailed, err, "remove %s", victim)
		}
		db.markDirty(victim, a.dir)
		db.event(RecoveryEvent{Kind: EventTruncationFinished, Anchor: a.id, File: victim})
		if truncated {
			continue
		}
		delete(stubs, s.segno)
		kept = append(kept, s)
	}
	return kept, nil
}

// orphan reports files that cannot belong to any anchor. They are left in
// place for an operator.
func (rc *reconciler) orphan(path, why string) error {
	e := errs.New(errs.CodeChainBroken, "%s: %s", path, why)
	e.File = path
	rc.db.event(RecoveryEvent{Kind: EventDamaged, File: path, Err: e})
	return nil
}

func (rc *reconciler) readHeader(path string) (int64, segment.Header, error) {
	f, err := rc.db.fs.Open(path)
	if err != nil {
		return 0, segment.Header{}, errs.Wrap(errs.CodeWriteFailed, err, "open %s", path)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, segment.Header{}, errs.Wrap(errs.CodeWriteFailed, err, "stat %s", path)
	}
	buf := make([]byte, min(st.Size(), int64(segment.HeaderSize(string(make([]byte, segment.MaxAnchorID))))))
	if _, err := f.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return 0, segment.Header{}, errs.Wrap(errs.CodeWriteFailed, err, "read %s", path)
	}
	h, _, err := segment.ParseHeader(buf)
	return st.Size(), h, err
}

// reconcileAnchor scans the anchor's segments from where the index ends and
// adopts, cuts or reports what it finds.
func (rc *reconciler) reconcileAnchor(a *anchor, segs []segFile, stubs map[uint64]string) error {
	db := rc.db
	st := a.snapshot()
	tree := cloneRange(a)
	newest := segs[len(segs)-1].segno
	startIdx := 0
	if st.segno != 0 {
		startIdx = slices.IndexFunc(segs, func(s segFile) bool { return s.segno == st.segno })
		if startIdx < 0 {
			if st.segSize == 0 && st.segno > newest {
				return nil // the active segment is not created yet: nothing past the index
			}
			e := errs.New(errs.CodeChainBroken, "active segment %d of anchor %q is missing", st.segno, a.id)
			e.File = db.segmentPath(a, st.segno)
			db.markDamaged(a, e)
			return nil
		}
	} else if segs[0].segno != 1 {
		// Compaction truncated the log: the removed segments left stubs with
		// their record hashes, which carry the chain and the tree to the
		// first segment still here.
		if err := rc.adoptStubs(a, &st, tree, stubs, segs[0].segno); err != nil {
			var e *errs.Error
			if errors.As(err, &e) && e.Code != errs.CodeWriteFailed {
				db.markDamaged(a, e)
				return nil
			}
			return err
		}
	}
	if st.segno != 0 {
		// A crash cannot tear a sealed segment (a seal is fsynced before
		// the next segment gets a byte), so a sealed segment that no longer
		// checks is damage: look at every seal, cheaply (header and footer).
		if err := rc.checkSeals(a, segs[:startIdx]); err != nil {
			var e *errs.Error
			if errors.As(err, &e) && e.Code != errs.CodeWriteFailed {
				db.markDamaged(a, e)
				return nil
			}
			return err
		}
	}
	adopted := uint64(0)
	for i := startIdx; i < len(segs); i++ {
		s := segs[i]
		if i > startIdx && s.segno != segs[i-1].segno+1 {
			e := errs.New(errs.CodeChainBroken, "anchor %q has segment %d after %d: segments are missing", a.id, s.segno, segs[i-1].segno)
			e.File = s.path
			db.markDamaged(a, e)
			return nil
		}
		n, sealed, stop, err := rc.scanSegment(a, &st, tree, s, i == len(segs)-1)
		adopted += n
		if err != nil {
			return err
		}
		if stop {
			break
		}
		if !sealed && i < len(segs)-1 {
			e := errs.New(errs.CodeChainBroken, "segment %d of anchor %q is not sealed but segment %d follows", s.segno, a.id, segs[i+1].segno)
			e.File = s.path
			db.markDamaged(a, e)
			break
		}
	}
	if adopted > 0 {
		db.event(RecoveryEvent{Kind: EventAdopted, Anchor: a.id, Records: adopted})
	}
	old := a.snapshot()
	if st.segno != old.segno || st.segFirst != old.segFirst || !old.stored {
		meta := anchorMeta{ActiveSegno: st.segno, ActiveFirstSeq: st.segFirst}
		if a.damaged() == nil {
			_ = rc.batch.Set(anchorKey(a.id), meta.encode(nil), nil)
			st.stored = true
		}
	}
	rc.raiseClock(st.lastCounter)
	a.publish(st, tree)
	return nil
}

// raiseClock moves the Lamport clock up to counter c (SPEC §1) and records it
// with the recovered rows.
func (rc *reconciler) raiseClock(c uint64) {
	if c > rc.db.clock.Load() {
		rc.db.clock.Store(c)
		_ = rc.batch.Set(metaKey(metaClock), be.AppendUint64(nil, c), nil)
	}
}

// checkSeals checks that each of the sealed segments still has its seal and
// that they link to each other.
func (rc *reconciler) checkSeals(a *anchor, sealed []segFile) error {
	db := rc.db
	var lastSeq uint64
	var lastHash segment.Hash
	for i, s := range sealed {
		f, err := db.fs.Open(s.path)
		if err != nil {
			return errs.Wrap(errs.CodeWriteFailed, err, "open %s", s.path)
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return errs.Wrap(errs.CodeWriteFailed, err, "stat %s", s.path)
		}
		h, ft, err := segment.ReadSeal(f, st.Size())
		f.Close()
		if err != nil {
			return frameErr(a.id, s.path, err)
		}
		if h.Anchor != a.id || h.Segno != s.segno || (i > 0 && (h.FirstSeq != lastSeq+1 || h.PrevHash != lastHash)) {
			e := errs.New(errs.CodeChainBroken, "sealed segment %s does not continue segment %d", s.path, s.segno-1)
			e.File = s.path
			return e
		}
		lastSeq, lastHash = ft.LastSeq, ft.LastHash
	}
	return nil
}

// adoptStubs indexes the record hashes of stubs 1..before-1: rows that say
// the records were truncated, and the tree nodes above them.
func (rc *reconciler) adoptStubs(a *anchor, st *anchorHead, tree *compact.Range, stubs map[uint64]string, before uint64) error {
	db := rc.db
	for segno := uint64(1); segno < before; segno++ {
		path, ok := stubs[segno]
		if !ok {
			e := errs.New(errs.CodeChainBroken, "anchor %q starts at segment %d and segment %d has no stub", a.id, before, segno)
			e.File = db.segmentPath(a, segno)
			return e
		}
		f, err := db.fs.Open(path)
		if err != nil {
			return errs.Wrap(errs.CodeWriteFailed, err, "open %s", path)
		}
		info, err := f.Stat()
		if err != nil {
			f.Close()
			return errs.Wrap(errs.CodeWriteFailed, err, "stat %s", path)
		}
		buf := make([]byte, info.Size())
		_, err = f.ReadAt(buf, 0)
		f.Close()
		if err != nil && !errors.Is(err, io.EOF) {
			return errs.Wrap(errs.CodeWriteFailed, err, "read %s", path)
		}
		stub, err := segment.ParseStub(buf)
		if err != nil {
			var e *errs.Error
			if errors.As(err, &e) {
				e = e.At(a.id, st.head+1, path, 0)
				return e
			}
			return err
		}
		if stub.Anchor != a.id || stub.Segno != segno || stub.FirstSeq != st.head+1 || stub.PrevHash != st.headHash {
			e := errs.New(errs.CodeChainBroken, "stub %s does not continue anchor %q at seq %d", path, a.id, st.head+1)
			e.File = path
			return e
		}
		for i, h := range stub.Hashes {
			se := seqEntry{Segno: segno, Hash: h, Counter: stub.Counters[i]}
			rc.scratch = se.encode(rc.scratch[:0])
			_ = rc.batch.Set(seqKey(a.id, stub.FirstSeq+uint64(i)), rc.scratch, nil)
			leaf := segment.LeafHash(h)
			_ = tree.Append(leaf[:], treeAppender{batch: rc.batch, anchor: a.id}.visit)
		}
		stubRows(&stub, func(_ byte, k, v []byte) { _ = rc.batch.Set(k, v, nil) })
		st.head, st.headHash, st.lastCounter = stub.LastSeq(), stub.LastHash(), stub.LastCounter
		st.segno, st.segFirst, st.segSize, st.segCount = segno+1, st.head+1, 0, 0
		rc.truncated[a.id] = st.head
	}
	return nil
}

// scanSegment reads one segment from where the index ends (st), adopting
// every whole record. stop means the log ends in this segment.
func (rc *reconciler) scanSegment(a *anchor, st *anchorHead, tree *compact.Range, s segFile, newest bool) (adopted uint64, sealed, stop bool, err error) {
	db := rc.db
	f, err := db.fs.Open(s.path)
	if err != nil {
		return 0, false, true, errs.Wrap(errs.CodeWriteFailed, err, "open %s", s.path)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return 0, false, true, errs.Wrap(errs.CodeWriteFailed, err, "stat %s", s.path)
	}
	sc, err := segment.NewScanner(f, info.Size())
	if err != nil {
		var fe *segment.FrameError
		if errors.As(err, &fe) {
			db.markDamaged(a, fe.AsError(a.id, s.path))
			return 0, false, true, nil
		}
		return 0, false, true, errs.Wrap(errs.CodeWriteFailed, err, "read %s", s.path)
	}
	h := sc.Header
	resume := st.segno == s.segno && st.segSize > 0
	if resume {
		if h.FirstSeq != st.segFirst {
			e := errs.New(errs.CodeIndexMismatch, "segment %s starts at seq %d, the index says %d", s.path, h.FirstSeq, st.segFirst)
			e.File = s.path
			db.markDamaged(a, e)
			return 0, false, true, nil
		}
		if st.segSize > info.Size() {
			e := errs.New(errs.CodeChainBroken, "segment %s is %d bytes; the index has records up to byte %d", s.path, info.Size(), st.segSize)
			e.File, e.Offset = s.path, info.Size()
			db.markDamaged(a, e)
			return 0, false, true, nil
		}
		sc.Resume(st.segSize, st.head+1, st.headHash, st.segCount)
	} else {
		// A segment the index has no record of: it must continue the log.
		wantFirst, wantPrev := st.head+1, st.headHash
		if h.Segno != s.segno || h.FirstSeq != wantFirst || h.PrevHash != wantPrev {
			e := errs.New(errs.CodeChainBroken, "segment %s header (segment %d, first seq %d) does not continue the log at seq %d",
				s.path, h.Segno, h.FirstSeq, wantFirst)
			e.File = s.path
			db.markDamaged(a, e)
			return 0, false, true, nil
		}
		st.segno, st.segFirst, st.segCount = s.segno, h.FirstSeq, 0
		st.segHeader = h.Checksum
		st.segSize = int64(sc.HeaderSize)
	}
	damaged := false
	for {
		fr, err := sc.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var fe *segment.FrameError
			if !errors.As(err, &fe) {
				return adopted, false, true, errs.Wrap(errs.CodeWriteFailed, err, "read %s", s.path)
			}
			if !newest {
				db.markDamaged(a, fe.AsError(a.id, s.path))
				return adopted, false, true, nil
			}
			// With an index, every record past its end is unsettled (a
			// settle flushes the index), and every one that was acknowledged
			// durably has just been restored from the journal: what still
			// fails there is a torn tail. A rebuild, or an older copy of
			// the index, has no such line: the records before a failing
			// frame may be long settled, so the failure is only a tail when
			// no whole record follows it; otherwise it is damage in the
			// middle of the log, which is reported and never cut (SPEC §3).
			if rc.fromNothing && fe.Kind != segment.Torn {
				if sc.WholeRecordAfter() {
					db.markDamaged(a, fe.AsError(a.id, s.path))
					damaged = true
					break
				}
			}
			// The newest segment ends in bytes no index row vouches for and
			// that do not form a whole, linked record: a torn tail.
			if err := rc.cut(a, s, sc.Offset(), info.Size(), fe); err != nil {
				return adopted, false, true, err
			}
			break
		}
		rec := fr.Record
		rc.scratch = indexRecord(rc.batch, &rec, s.segno, fr.Offset, fr.Size, db.opts.InlineValueMax, rc.scratch)
		leaf := segment.LeafHash(rec.Hash)
		_ = tree.Append(leaf[:], treeAppender{batch: rc.batch, anchor: a.id}.visit)
		st.head, st.headHash, st.lastCounter = rec.Seq, rec.Hash, rec.Counter
		st.segSize = fr.Offset + int64(fr.Size)
		st.segCount++
		adopted++
	}
	if adopted > 0 {
		// The adopted bytes may only be in the page cache: make them durable
		// before any index row points at them.
		if err := f.Sync(); err != nil {
			return adopted, false, true, errs.Wrap(errs.CodeWriteFailed, err, "fsync %s", s.path)
		}
	}
	if damaged {
		return adopted, false, true, nil
	}
	if sc.Footer() != nil {
		st.segno++
		st.segFirst = st.head + 1
		st.segSize, st.segCount = 0, 0
		return adopted, true, false, nil
	}
	return adopted, false, newest, nil
}

// cut removes the torn tail [at, size) of the newest segment, keeping the
// bytes in lost+found.
func (rc *reconciler) cut(a *anchor, s segFile, at, size int64, why *segment.FrameError) error {
	db := rc.db
	saved, err := rc.saveCut(s.path, segment.AnchorPathID(a.id), s.segno, at, size)
	if err != nil {
		return err
	}
	if err := db.truncateFile(s.path, at); err != nil {
		return err
	}
	e := why.AsError(a.id, s.path)
	db.event(RecoveryEvent{Kind: EventCut, Anchor: a.id, File: s.path, Offset: at, Bytes: size - at, Saved: saved, Err: e})
	return nil
}

// truncateFile shortens path to size by rewriting its prefix through a
// temporary file and a rename (vfs has no truncate, and a rename is atomic).
func (db *DB) truncateFile(path string, size int64) error {
	f, err := db.fs.Open(path)
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "open %s", path)
	}
	buf := make([]byte, size)
	_, err = f.ReadAt(buf, 0)
	_ = f.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return errs.Wrap(errs.CodeWriteFailed, err, "read %s", path)
	}
	return db.writeWholeFile(path, buf)
}

// saveCut copies bytes [from, to) of path into lost+found and returns the
// copy's path.
func (rc *reconciler) saveCut(path, pathID string, segno uint64, from, to int64) (string, error) {
	db := rc.db
	if to <= from {
		return "", nil
	}
	f, err := db.fs.Open(path)
	if err != nil {
		return "", errs.Wrap(errs.CodeWriteFailed, err, "open %s", path)
	}
	buf := make([]byte, to-from)
	_, err = f.ReadAt(buf, from)
	_ = f.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return "", errs.Wrap(errs.CodeWriteFailed, err, "read %s", path)
	}
	lf := db.fs.PathJoin(db.dir, LostAndFound)
	if err := db.fs.MkdirAll(lf, 0o755); err != nil {
		return "", errs.Wrap(errs.CodeWriteFailed, err, "create %s", lf)
	}
	// The time keeps a second cut at the same place from replacing the first.
	dst := db.fs.PathJoin(lf, fmt.Sprintf("%s-%s-%d-%d.cut", pathID, segment.FileName(segno), from, db.opts.Clock().UnixNano()))
	if err := db.writeWholeFile(dst, buf); err != nil {
		return "", err
	}
	if err := db.syncDir(db.dir); err != nil {
		return "", err
	}
	return dst, nil
}

// missingAnchors reports anchors the index knows whose directory is gone.
func (rc *reconciler) missingAnchors() error {
	db := rc.db
	it, err := db.index.NewIter(&pebble.IterOptions{LowerBound: []byte{tagAnchor}, UpperBound: []byte{tagAnchor + 1}})
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "index iterator")
	}
	var missing []string
	for ok := it.First(); ok; ok = it.Next() {
		id := string(it.Key()[1:])
		if !rc.seen[id] {
			missing = append(missing, id)
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "read anchors")
	}
	for _, id := range missing {
		a, err := db.getAnchor(id, false)
		if err != nil || a == nil {
			continue
		}
		rc.raiseClock(a.snapshot().lastCounter)
		pid := segment.AnchorPathID(id)
		foreign := rc.foreign[pid]
		if foreign == nil {
			foreign = rc.foreign[pid[:2]]
		}
		delete(rc.foreign, pid)
		if foreign != nil && a.damaged() == nil {
			db.markDamaged(a, foreign)
		}
		if st := a.snapshot(); st.head > 0 && a.damaged() == nil {
			e := errs.New(errs.CodeChainBroken, "the segments of anchor %q (%d records) are missing", id, st.head)
			e.File = a.dir
			if torn := rc.headerless[segment.AnchorPathID(id)]; len(torn) > 0 {
				e = errs.New(errs.CodeChainBroken, "the segments of anchor %q (%d records) have no whole header", id, st.head)
				e.File = torn[len(torn)-1].path
			}
			db.markDamaged(a, e)
		}
		if a.damaged() != nil {
			// Its files stay as they are for an operator.
			delete(rc.headerless, segment.AnchorPathID(id))
		}
	}
	return nil
}

var _ = vfs.WriteCategoryUnspecified
