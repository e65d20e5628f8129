package engine

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
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
	id, err := rc.anchorNamed(segs)
	if err != nil {
		return err
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
	id, err := rc.anchorNamed(segs)
	if err != nil {
		return err
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

// anchorNamed returns the anchor the first of segs whose header reads names,
// or "" when none reads. A header that does not verify is skipped; any
// other failure is returned.
func (rc *reconciler) anchorNamed(segs []segFile) (string, error) {
	for _, s := range segs {
		_, h, err := rc.readHeader(s.path)
		if err == nil {
			return h.Anchor, nil
		}
		var fe *segment.FrameError
		if !errors.As(err, &fe) {
			return "", err
		}
	}
	return "", nil
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
			e, found, err := db.location(a.id, h.FirstSeq)
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

// missingAnchors reports anchors the index knows whose directory is gone.
func (rc *reconciler) missingAnchors() error {
	db := rc.db
	it, err := db.index.NewIter(&pebble.IterOptions{LowerBound: []byte{schema.TagAnchor}, UpperBound: []byte{schema.TagAnchor + 1}})
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
			e := errs.New(errs.CodeChainBroken, "the segments of anchor %q (%s) are missing", id, plural(st.head, "record"))
			e.File = a.dir
			if torn := rc.headerless[segment.AnchorPathID(id)]; len(torn) > 0 {
				e = errs.New(errs.CodeChainBroken, "the segments of anchor %q (%s) have no whole header", id, plural(st.head, "record"))
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
