package engine

// One anchor's segments against the index, in recovery and in a rebuild:
// the scan from where the index ends, seals, stubs of truncated segments,
// and the cut of a torn tail. reconcile.go walks the tree and calls
// reconcileAnchor for each anchor directory it names.

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/engine/internal/treestore"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/transparency-dev/merkle/compact"
)

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
		meta := schema.AnchorMeta{ActiveSegno: st.segno, ActiveFirstSeq: st.segFirst}
		if a.damaged() == nil {
			_ = rc.batch.Set(schema.AnchorKey(a.id), meta.Append(nil), nil)
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
		_ = rc.batch.Set(schema.MetaKey(schema.MetaClock), be.AppendUint64(nil, c), nil)
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
			se := schema.Location{Segno: segno, Hash: h, Counter: stub.Counters[i]}
			rc.scratch = se.Append(rc.scratch[:0])
			_ = rc.batch.Set(schema.SeqKey(a.id, stub.FirstSeq+uint64(i)), rc.scratch, nil)
			leaf := segment.LeafHash(h)
			_ = tree.Append(leaf[:], treestore.Visitor(rc.batch, a.id))
		}
		schema.StubRows(&stub, func(_ byte, k, v []byte) { _ = rc.batch.Set(k, v, nil) })
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
		rc.scratch = schema.RecordRows(rc.batch, rc.batch, &rec, s.segno, fr.Offset, fr.Size, db.opts.InlineValueMax, rc.scratch)
		leaf := segment.LeafHash(rec.Hash)
		_ = tree.Append(leaf[:], treestore.Visitor(rc.batch, a.id))
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
	return db.writeFileFrom(path, path, 0, size)
}

// saveCut copies bytes [from, to) of path into lost+found and returns the
// copy's path.
func (rc *reconciler) saveCut(path, pathID string, segno uint64, from, to int64) (string, error) {
	db := rc.db
	if to <= from {
		return "", nil
	}
	lf := db.fs.PathJoin(db.dir, LostAndFound)
	if err := db.fs.MkdirAll(lf, 0o755); err != nil {
		return "", errs.Wrap(errs.CodeWriteFailed, err, "create %s", lf)
	}
	// The time keeps a second cut at the same place from replacing the first.
	dst := db.fs.PathJoin(lf, fmt.Sprintf("%s-%s-%d-%d.cut", pathID, segment.FileName(segno), from, db.opts.Clock().UnixNano()))
	if err := db.writeFileFrom(dst, path, from, to); err != nil {
		return "", err
	}
	if err := db.syncDir(db.dir); err != nil {
		return "", err
	}
	return dst, nil
}
