package engine

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/transparency-dev/merkle/compact"
)

// A rebuild from a snapshot (RebuildOptions.FromSnapshot) trades two things
// for speed, and says so in its report:
//
//   - the state below the snapshot's frontier comes from the snapshot (which
//     verifies), so each key's history starts at its version in the snapshot;
//   - records up to the frontier are read for their index rows without
//     recomputing their hashes: seqs, links and seals are still checked, so
//     the chain of stored hashes holds together, but a record whose body was
//     altered is left for `verify` to find. Records after the frontier (the
//     tail) are checked in full.
//
// The rows up to the frontier are written as sorted tables and ingested into
// Pebble in one step, never through its memtable. Any surprise on disk — a
// torn tail, damage, an unexpected file — abandons the fast path for a full
// replay, which knows how to recover them.

// errFastPathAbandoned makes initIndex fall back to a full replay.
var errFastPathAbandoned = errors.New("fast rebuild abandoned")

type rebuildAnchor struct {
	id    string
	dir   string
	segs  []segFile
	stubs map[uint64]string
}

// tableWriter writes sorted rows of one table to sstables of up to 64 MiB.
type tableWriter struct {
	db    *DB
	dir   string
	name  string
	w     *sstable.Writer
	n     int
	paths []string
	size  int
}

func (t *tableWriter) set(k, v []byte) error {
	if t.w == nil {
		path := t.db.fs.PathJoin(t.dir, fmt.Sprintf("%s-%04d.sst", t.name, len(t.paths)))
		f, err := t.db.fs.Create(path, vfs.WriteCategoryUnspecified)
		if err != nil {
			return errs.Wrap(errs.CodeWriteFailed, err, "create %s", path)
		}
		po := t.db.pebbleOpts
		t.w = sstable.NewWriter(objstorageprovider.NewFileWritable(f), po.MakeWriterOptions(0, t.db.index.TableFormat()))
		t.paths = append(t.paths, path)
		t.size = 0
	}
	if err := t.w.Set(k, v); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "write rebuilt index table")
	}
	t.n++
	t.size += len(k) + len(v)
	if t.size >= 64<<20 {
		return t.finish()
	}
	return nil
}

func (t *tableWriter) finish() error {
	if t.w == nil {
		return nil
	}
	err := t.w.Close()
	t.w = nil
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "finish rebuilt index table")
	}
	return nil
}

type kv struct{ k, v []byte }

// location of a record in its segment, for the k rows written from the
// snapshot.
type location struct {
	segno  uint64
	offset int64
	size   uint32
	found  bool
}

// rebuildFromSnapshot builds the index of an empty Pebble from the newest
// snapshot that verifies and the segments. It returns errFastPathAbandoned
// (with the reason in an event) when the full replay must do the work.
func (db *DB) rebuildFromSnapshot(ctx context.Context) error {
	abandon := func(format string, args ...any) error {
		db.event(RecoveryEvent{Kind: EventFastRebuildAbandoned, Err: errs.New(errs.CodeIndexMismatch, format, args...)})
		return errFastPathAbandoned
	}
	list, err := snapshot.List(db.fs, db.SnapshotsDir())
	if err != nil {
		return err
	}
	var snap *snapshot.Info
	for i := len(list) - 1; i >= 0 && snap == nil; i-- {
		if list[i].Err != nil {
			db.event(RecoveryEvent{Kind: EventSnapshotSkipped, File: list[i].Path, Err: asErr(list[i].Err)})
			continue
		}
		v, err := snapshot.Verify(db.fs, list[i].Path)
		if err != nil {
			db.event(RecoveryEvent{Kind: EventSnapshotSkipped, File: list[i].Path, Err: asErr(err)})
			continue
		}
		snap = &v
	}
	if snap == nil {
		return abandon("no snapshot verifies")
	}
	anchors, err := db.rebuildAnchors()
	if err != nil {
		if errors.Is(err, errFastPathAbandoned) {
			return abandon("%v", err)
		}
		return err
	}
	front := snap.Frontier
	onDisk := map[string]bool{}
	for id := range front {
		onDisk[id] = true
	}

	// The k rows written from the snapshot need the location of each
	// version's record: collect which records those are.
	need := map[anchorSeq]*location{}
	if err := forSnapshotEntries(db, snap.Path, func(e snapshot.Entry) error {
		need[anchorSeq{e.Version.Anchor, e.Version.Seq}] = &location{}
		return nil
	}); err != nil {
		return err
	}

	var tag [8]byte
	_, _ = rand.Read(tag[:])
	tmp := db.fs.PathJoin(db.dir, "tmp", "rebuild-"+hex.EncodeToString(tag[:]))
	if err := db.fs.MkdirAll(tmp, 0o755); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "create %s", tmp)
	}
	defer func() { _ = db.fs.RemoveAll(tmp) }()
	tw := func(name string) *tableWriter { return &tableWriter{db: db, dir: tmp, name: name} }
	aW, iW, kW, nW, sW := tw("a"), tw("i"), tw("k"), tw("n"), tw("s")
	tail := db.index.NewBatch()
	defer func() { _ = tail.Close() }()
	var clock uint64
	var records uint64
	for _, ra := range anchors {
		if err := ctx.Err(); err != nil {
			return err
		}
		fr := front[ra.id].Seq
		st, err := db.rebuildAnchor(ra, fr, need, sW, iW, nW, tail, &records)
		if err != nil {
			if errors.Is(err, errFastPathAbandoned) {
				return abandon("anchor %q: %v", ra.id, err)
			}
			return err
		}
		delete(onDisk, ra.id)
		meta := anchorMeta{ActiveSegno: st.segno, ActiveFirstSeq: st.segFirst}
		if err := aW.set(anchorKey(ra.id), meta.encode(nil)); err != nil {
			return err
		}
		clock = max(clock, st.lastCounter)
		if tail.Len() > 16<<20 {
			if err := db.applyBatch(tail); err != nil {
				return err
			}
			_ = tail.Close()
			tail = db.index.NewBatch()
		}
	}
	// The state at the frontier, sorted like the k table.
	if err := forSnapshotEntries(db, snap.Path, func(e snapshot.Entry) error {
		v := e.Version
		loc := need[anchorSeq{v.Anchor, v.Seq}]
		ve := versionEntry{Type: verPut, Seq: v.Seq, Time: v.Time, Hash: v.Hash}
		if loc != nil && loc.found {
			ve.Segno, ve.Offset, ve.Size = loc.segno, loc.offset, loc.size
		}
		if len(e.Value) <= db.opts.InlineValueMax || ve.Size == 0 {
			ve.Inline, ve.Value = true, e.Value
		}
		return kW.set(versionKey(e.Key, v.Counter, v.Anchor), ve.encode(nil))
	}); err != nil {
		return err
	}
	for id := range onDisk {
		return abandon("the snapshot names anchor %q, which has no segments", id)
	}
	var paths []string
	for _, t := range []*tableWriter{aW, iW, kW, nW, sW} {
		if err := t.finish(); err != nil {
			return err
		}
		paths = append(paths, t.paths...)
	}
	if len(paths) > 0 {
		if err := db.index.Ingest(ctx, paths); err != nil {
			return errs.Wrap(errs.CodeWriteFailed, err, "ingest the rebuilt index")
		}
	}
	if err := db.applyBatch(tail); err != nil {
		return err
	}
	db.clock.Store(clock)
	db.event(RecoveryEvent{Kind: EventStateFromSnapshot, File: snap.Path, Records: records})
	return db.flushIndex()
}

// rebuildAnchors lists every anchor directory with its segments and stubs,
// sorted by anchor id (the order of the index tables).
func (db *DB) rebuildAnchors() ([]rebuildAnchor, error) {
	root := db.fs.PathJoin(db.dir, segment.AnchorsDir)
	fans, err := db.fs.List(root)
	if err != nil {
		if oserrorIsNotExist(err) {
			return nil, nil
		}
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "list %s", root)
	}
	var out []rebuildAnchor
	rc := &reconciler{db: db}
	for _, fan := range fans {
		if len(fan) != 2 || !isHex(fan) {
			return nil, fmt.Errorf("%w: unexpected %s in %s", errFastPathAbandoned, fan, root)
		}
		subs, err := db.fs.List(db.fs.PathJoin(root, fan))
		if err != nil {
			return nil, errs.Wrap(errs.CodeWriteFailed, err, "list %s", fan)
		}
		for _, sub := range subs {
			dir := db.fs.PathJoin(root, fan, sub)
			names, err := db.fs.List(dir)
			if err != nil {
				return nil, errs.Wrap(errs.CodeWriteFailed, err, "list %s", dir)
			}
			ra := rebuildAnchor{dir: dir, stubs: map[uint64]string{}}
			for _, n := range names {
				if segno, ok := segment.ParseFileName(n); ok {
					ra.segs = append(ra.segs, segFile{segno, db.fs.PathJoin(dir, n)})
				} else if segno, ok := segment.ParseStubFileName(n); ok {
					ra.stubs[segno] = db.fs.PathJoin(dir, n)
				} else {
					return nil, fmt.Errorf("%w: unexpected file %s", errFastPathAbandoned, n)
				}
			}
			if len(ra.segs) == 0 {
				return nil, fmt.Errorf("%w: %s holds no segment", errFastPathAbandoned, dir)
			}
			slices.SortFunc(ra.segs, func(a, b segFile) int { return cmp.Compare(a.segno, b.segno) })
			_, h, err := rc.readHeader(ra.segs[0].path)
			if err != nil {
				return nil, fmt.Errorf("%w: %v", errFastPathAbandoned, err)
			}
			if segment.AnchorPathID(h.Anchor) != fan+sub {
				return nil, fmt.Errorf("%w: %s names anchor %q", errFastPathAbandoned, ra.segs[0].path, h.Anchor)
			}
			ra.id = h.Anchor
			out = append(out, ra)
		}
	}
	slices.SortFunc(out, func(a, b rebuildAnchor) int { return cmp.Compare(a.id, b.id) })
	return out, nil
}

// rebuildAnchor reads one anchor's stubs and segments and writes its s, i
// and n rows (sorted) and the k rows of its tail (after the frontier seq fr)
// into tail. It returns the anchor's head.
func (db *DB) rebuildAnchor(ra rebuildAnchor, fr uint64, need map[anchorSeq]*location,
	sW, iW, nW *tableWriter, tail *pebble.Batch, records *uint64) (anchorHead, error) {
	st := anchorHead{headHash: segment.GenesisHash(ra.id)}
	tree := merkleFactory.NewEmptyRange(0)
	var nodes, idems []kv
	visit := func(id compact.NodeID, hash []byte) {
		if storedNodeLevel(id.Level) {
			nodes = append(nodes, kv{nodeKey(ra.id, uint8(id.Level), id.Index), slices.Clone(hash)})
		}
	}
	var scratch []byte
	add := func(segno uint64, off int64, size int, rec *segment.Record) error {
		se := seqEntry{Segno: segno, Offset: off, Size: uint32(size), Counter: rec.Counter, Hash: rec.Hash}
		if err := sW.set(seqKey(ra.id, rec.Seq), se.encode(scratch[:0])); err != nil {
			return err
		}
		leaf := segment.LeafHash(rec.Hash)
		_ = tree.Append(leaf[:], visit)
		if len(rec.IdempotencyKey) > 0 {
			ie := idemEntry{Seq: rec.Seq, Counter: rec.Counter, Hash: rec.Hash, Fingerprint: segment.Fingerprint(rec.Type, rec.Key, rec.Value)}
			idems = append(idems, kv{idemKey(ra.id, rec.IdempotencyKey), ie.encode(nil)})
		}
		if loc := need[anchorSeq{ra.id, rec.Seq}]; loc != nil {
			*loc = location{segno: segno, offset: off, size: uint32(size), found: true}
		}
		if rec.Seq > fr && rec.IsKV() {
			// The tail: its versions are not in the snapshot.
			scratch = indexVersion(tail, rec, segno, off, size, db.opts.InlineValueMax, scratch)
		}
		st.head, st.headHash, st.lastCounter = rec.Seq, rec.Hash, rec.Counter
		*records++
		return nil
	}
	// Stubs first (a truncated log), then segments.
	first := ra.segs[0].segno
	for segno := uint64(1); segno < first; segno++ {
		path, ok := ra.stubs[segno]
		if !ok {
			return st, fmt.Errorf("%w: segment %d has neither file nor stub", errFastPathAbandoned, segno)
		}
		buf, err := readWhole(db.fs, path)
		if err != nil {
			return st, err
		}
		stub, err := segment.ParseStub(buf)
		if err != nil || stub.FirstSeq != st.head+1 || stub.PrevHash != st.headHash {
			return st, fmt.Errorf("%w: stub %s does not continue the chain", errFastPathAbandoned, path)
		}
		for i, h := range stub.Hashes {
			rec := segment.Record{Seq: stub.FirstSeq + uint64(i), Hash: h}
			if i == len(stub.Hashes)-1 {
				rec.Counter = stub.LastCounter
			}
			se := seqEntry{Segno: segno, Hash: h, Counter: rec.Counter}
			if err := sW.set(seqKey(ra.id, rec.Seq), se.encode(scratch[:0])); err != nil {
				return st, err
			}
			leaf := segment.LeafHash(h)
			_ = tree.Append(leaf[:], visit)
			st.head, st.headHash, st.lastCounter = rec.Seq, h, rec.Counter
		}
	}
	for i, sf := range ra.segs {
		if sf.segno != first+uint64(i) {
			return st, fmt.Errorf("%w: segment %d is missing", errFastPathAbandoned, first+uint64(i))
		}
		f, err := db.fs.Open(sf.path)
		if err != nil {
			return st, errs.Wrap(errs.CodeWriteFailed, err, "open %s", sf.path)
		}
		info, err := f.Stat()
		if err != nil {
			f.Close()
			return st, errs.Wrap(errs.CodeWriteFailed, err, "stat %s", sf.path)
		}
		sc, err := segment.NewScanner(f, info.Size())
		if err != nil {
			f.Close()
			return st, fmt.Errorf("%w: %v", errFastPathAbandoned, err)
		}
		h := sc.Header
		if h.Anchor != ra.id || h.Segno != sf.segno || h.FirstSeq != st.head+1 || h.PrevHash != st.headHash {
			f.Close()
			return st, fmt.Errorf("%w: %s does not continue the chain", errFastPathAbandoned, sf.path)
		}
		sc.SkipHashes = true
		st.segno, st.segFirst, st.segCount = sf.segno, h.FirstSeq, 0
		for {
			fr2, err := sc.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				f.Close()
				return st, fmt.Errorf("%w: %v", errFastPathAbandoned, err)
			}
			rec := fr2.Record
			if rec.Seq > fr && rec.ComputeHash() != rec.Hash {
				f.Close()
				return st, fmt.Errorf("%w: record %d does not hash to its hash", errFastPathAbandoned, rec.Seq)
			}
			if err := add(sf.segno, fr2.Offset, fr2.Size, &rec); err != nil {
				f.Close()
				return st, err
			}
		}
		sealed := sc.Footer() != nil
		f.Close()
		if !sealed && i < len(ra.segs)-1 {
			return st, fmt.Errorf("%w: %s is not sealed", errFastPathAbandoned, sf.path)
		}
		if sealed {
			st.segno, st.segFirst = sf.segno+1, st.head+1
		}
	}
	if st.head < fr {
		return st, fmt.Errorf("%w: the log ends at seq %d, before the snapshot's frontier %d", errFastPathAbandoned, st.head, fr)
	}
	slices.SortFunc(nodes, func(a, b kv) int { return bytes.Compare(a.k, b.k) })
	slices.SortFunc(idems, func(a, b kv) int { return bytes.Compare(a.k, b.k) })
	for _, r := range idems {
		if err := iW.set(r.k, r.v); err != nil {
			return st, err
		}
	}
	for _, r := range nodes {
		if err := nW.set(r.k, r.v); err != nil {
			return st, err
		}
	}
	return st, nil
}

func readWhole(fs vfs.FS, path string) ([]byte, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "open %s", path)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "stat %s", path)
	}
	buf := make([]byte, st.Size())
	if _, err := f.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "read %s", path)
	}
	return buf, nil
}

func forSnapshotEntries(db *DB, path string, fn func(snapshot.Entry) error) error {
	s, err := snapshot.Open(db.fs, path)
	if err != nil {
		return err
	}
	defer s.Close()
	for e, err := range s.Entries() {
		if err != nil {
			return err
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}
