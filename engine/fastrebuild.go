package engine

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sync"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/engine/internal/scratch"
	"github.com/anchordb/anchordb/engine/internal/treestore"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/transparency-dev/merkle/compact"
)

// A rebuild from a snapshot (RebuildOptions.FromSnapshot) trades two things
// for speed, and says so in its report:
//
//   - the state below the snapshot's frontier comes from the snapshot (which
//     verifies), so each key's history starts at its version in the snapshot
//     (with the deletes up to the frontier, which a snapshot does not hold,
//     indexed besides: History and Versions may show a delete with no put
//     before it);
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

// errSnapshotNotOfLog abandons the fast path for a snapshot whose frontier
// names heads the log does not have: a well-formed snapshot of another
// history, which is corrupt here (INT_003).
var errSnapshotNotOfLog = fmt.Errorf("%w: the snapshot's frontier is not the log's", errFastPathAbandoned)

// errRebuildStopped ends the snapshot's reader when the rebuild returns
// before it is done; nobody reads it.
var errRebuildStopped = errors.New("rebuild stopped")

type rebuildAnchor struct {
	id    string
	dir   string
	segs  []segFile
	stubs map[uint64]string
}

// rebuildFromSnapshot builds the index of an empty Pebble from the newest
// snapshot that the audit log records and that verifies, and the segments. It returns errFastPathAbandoned
// (with the reason in an event) when the full replay must do the work.
func (db *DB) rebuildFromSnapshot(ctx context.Context) error {
	// NB: most reasons to fall back are the database's own shape (a tail
	// that sorts before the frontier, a snapshot older than a cut), not
	// damage: the event says why in a note, with a code only when the
	// cause carried one (a snapshot that fails its checks).
	abandon := func(format string, args ...any) error {
		ev := RecoveryEvent{Kind: EventFastRebuildAbandoned, Note: fmt.Sprintf(format, args...)}
		for _, a := range args {
			if err, ok := a.(error); ok && errs.CodeOf(err) != "" {
				ev.Note, ev.Err = "", errs.New(errs.CodeOf(err), format, args...)
			}
		}
		db.event(ev)
		return errFastPathAbandoned
	}
	list, err := snapshot.List(db.fs, db.SnapshotsDir())
	if err != nil {
		return err
	}
	// NB: the state is taken from the snapshot as it stands, and its
	// hashes are unkeyed: anyone who can write snapshots/ can make a
	// well-formed one with the log's frontier and other values. Only a
	// snapshot the audit log records as created, with its file and state
	// hashes, is the database's (see rebuildVouchers for what that trusts
	// with the index gone).
	vouched, unvouched, err := db.rebuildVouchers()
	if err != nil {
		return err
	}
	skip := func(path string, err *errs.Error) {
		db.event(RecoveryEvent{Kind: EventSnapshotSkipped, File: path, Err: err})
	}
	notVouched := func(s snapshot.Info) *errs.Error {
		why := "the audit log records no snapshot of that name with its file and state hashes"
		if unvouched != "" {
			why = "the audit log vouches for no snapshot: " + unvouched
		}
		e := errs.New(errs.CodeDependencyMissing, "snapshot %s is not taken as the state at its frontier: %s", s.Name, why)
		e.File = s.Path
		return e
	}
	// The newest snapshot the audit log vouches for whose file checks; its
	// entries are checked against its state hash while they are written (a
	// failure there abandons the fast path before anything is ingested).
	var snap *snapshot.Snapshot
	for i := len(list) - 1; i >= 0 && snap == nil; i-- {
		if list[i].Err != nil {
			skip(list[i].Path, asErr(list[i].Err))
			continue
		}
		if !vouches(vouched, list[i]) {
			skip(list[i].Path, notVouched(list[i]))
			continue
		}
		s, err := snapshot.Open(db.fs, list[i].Path)
		if err != nil {
			skip(list[i].Path, asErr(err))
			continue
		}
		// Open checked every byte against the file hash it read.
		if !vouches(vouched, s.Info()) {
			_ = s.Close()
			skip(list[i].Path, notVouched(s.Info()))
			continue
		}
		snap = s
	}
	if snap == nil {
		return abandon("no snapshot the audit log records verifies")
	}
	defer snap.Close()
	info := snap.Info()
	anchors, err := db.rebuildAnchors()
	if err != nil {
		if errors.Is(err, errFastPathAbandoned) {
			return abandon("%v", err)
		}
		return err
	}
	front := info.Frontier
	onDisk := map[string]bool{}
	for _, ra := range anchors {
		onDisk[ra.id] = true
	}
	for id := range front {
		if !onDisk[id] {
			return abandon("the snapshot names anchor %q, which has no segments", id)
		}
	}

	// Records a compaction truncated are not in segments to defer to: their
	// state comes from the stubs' kept records instead.
	firstPresent := map[string]uint64{}
	for _, ra := range anchors {
		if len(ra.stubs) == 0 || len(ra.segs) == 0 {
			continue
		}
		first, err := segmentFirstSeq(db.fs, ra.segs[0].path)
		if err != nil {
			return abandon("%v", err)
		}
		firstPresent[ra.id] = first
		// The tail's versions come from segments only: a frontier below
		// the cut would leave the records between them, in stubs, without
		// rows. Compaction cuts below its oldest kept snapshot, so only an
		// older snapshot restored by hand gets here.
		if front[ra.id].Seq+1 < first {
			return abandon("the snapshot's frontier for anchor %q (seq %d) is below its cut (seq %d)", ra.id, front[ra.id].Seq, first-1)
		}
	}

	tmp, err := scratch.MkdirTemp(db.fs, db.dir, "rebuild")
	if err != nil {
		return err
	}
	done := &finisher{}
	tw := func(name string) *tableWriter { return &tableWriter{db: db, dir: tmp, name: name, done: done} }
	aW, iW, kW, nW, sW := tw("a"), tw("i"), tw("k"), tw("n"), tw("s")
	stop := make(chan struct{}) // closed on return: every goroutine below ends
	var workers sync.WaitGroup
	kDone := make(chan error, 1)
	kWaited := false
	// On every return, in this order: stop the goroutines and wait for them
	// (the snapshot's reader and the k table are theirs), hand every table
	// still open to the finisher and wait for it, and only then remove the
	// directory. Nothing writes into it, or reads the snapshot, afterwards.
	defer func() {
		close(stop)
		workers.Wait()
		if !kWaited {
			<-kDone
		}
		for _, t := range []*tableWriter{aW, iW, nW, sW} {
			t.finish()
		}
		_ = done.wait()
		_ = db.fs.RemoveAll(tmp)
	}()

	// The state at the frontier goes to the k table while the anchors are
	// read. Its rows do not say where their records are (segno 0): reads
	// find that in the records' s rows.
	inSnapTruncated := map[anchorSeq]bool{} // written by the k goroutine, read after kDone
	go func() {
		var err error
		var key, val []byte // reused: the table writer copies what it keeps
		for e, eerr := range snap.Entries() {
			if eerr != nil {
				err = eerr
				break
			}
			select {
			case <-stop:
				err = errRebuildStopped
			default:
			}
			if err != nil {
				break
			}
			v := e.Version
			if v.Seq < firstPresent[v.Anchor] {
				// Truncated: its row comes from the stub that kept it.
				inSnapTruncated[anchorSeq{v.Anchor, v.Seq}] = true
				continue
			}
			ve := schema.Version{Type: schema.VersionPut, Seq: v.Seq, Time: v.Time, Hash: v.Hash}
			if len(e.Value) <= db.opts.InlineValueMax {
				ve.Inline, ve.Value = true, e.Value
			}
			key = schema.AppendVersionKey(key[:0], e.Key, v.Counter, v.Anchor)
			val = ve.Append(val[:0])
			if err = kW.set(key, val); err != nil {
				break
			}
		}
		kW.finish()
		kDone <- err
	}()

	// Anchors are read by workers and written in id order by this goroutine.
	type result struct {
		out rebuiltAnchor
		err error
		ok  chan struct{}
	}
	results := make([]result, len(anchors))
	for i := range results {
		results[i].ok = make(chan struct{})
	}
	next := make(chan int)
	window := make(chan struct{}, 16) // anchors read ahead of the writer
	for w := 0; w < max(1, min(4, runtime.GOMAXPROCS(0))); w++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			var buf []byte // the worker's segment read buffer
			for i := range next {
				results[i].out, results[i].err = db.rebuildAnchor(anchors[i], front[anchors[i].id], &buf)
				close(results[i].ok)
			}
		}()
	}
	go func() {
		defer close(next)
		for i := range anchors {
			select {
			case window <- struct{}{}:
			case <-stop:
				return
			}
			select {
			case next <- i:
			case <-stop:
				return
			}
		}
	}()
	tail := &tailRuns{db: db, dir: tmp, done: done}
	var clock, records uint64
	// The snapshot holds no deletes, so its state stands for the frontier
	// only if every tail record sorts after every record inside it (merged
	// order, SPEC §1): a caller's counters can put a tail record before a
	// delete inside the frontier, which a full replay then applies last.
	var lastIn, firstAfter mergedPos
	anyAfter := false
	var kept []keptRecord
	for i, ra := range anchors {
		if err := ctx.Err(); err != nil {
			return err
		}
		<-results[i].ok
		<-window
		r := results[i]
		results[i].out = rebuiltAnchor{} // let it go
		if r.err != nil {
			if errors.Is(r.err, errSnapshotNotOfLog) {
				db.event(RecoveryEvent{Kind: EventSnapshotSkipped, File: info.Path, Err: errs.New(errs.CodeSnapshotCorrupted, "%v", r.err)})
			}
			if errors.Is(r.err, errFastPathAbandoned) {
				return abandon("anchor %q: %v", ra.id, r.err)
			}
			return r.err
		}
		for _, t := range []struct {
			w    *tableWriter
			rows []kv
		}{{sW, r.out.s}, {iW, r.out.i}, {nW, r.out.n}} {
			for _, row := range t.rows {
				if err := t.w.set(row.k, row.v); err != nil {
					return err
				}
			}
		}
		for _, row := range r.out.k {
			if err := tail.add(row); err != nil {
				return err
			}
		}
		kept = append(kept, r.out.kept...)
		meta := schema.AnchorMeta{ActiveSegno: r.out.st.segno, ActiveFirstSeq: r.out.st.segFirst}
		if err := aW.set(schema.AnchorKey(ra.id), meta.Append(nil)); err != nil {
			return err
		}
		clock = max(clock, r.out.st.lastCounter)
		records += r.out.records
		if p := (mergedPos{r.out.frCounter, ra.id}); front[ra.id].Seq > 0 && lastIn.before(p) {
			lastIn = p
		}
		if p := (mergedPos{r.out.tailCounter, ra.id}); r.out.tail && (!anyAfter || p.before(firstAfter)) {
			firstAfter, anyAfter = p, true
		}
	}
	if anyAfter && !lastIn.before(firstAfter) {
		return abandon("anchor %q seq %d (counter %d) sorts before the last record inside the snapshot's frontier (anchor %q, counter %d)",
			firstAfter.anchor, front[firstAfter.anchor].Seq+1, firstAfter.counter, lastIn.anchor, lastIn.counter)
	}
	if err := tail.flush(); err != nil {
		return err
	}
	kErr := <-kDone
	kWaited = true
	if kErr != nil {
		if errs.CodeOf(kErr) == errs.CodeSnapshotCorrupted {
			return abandon("snapshot %s: %v", info.Path, kErr)
		}
		return kErr
	}
	// The rest goes through one batch after the ingestions: the newest
	// versions that stubs kept, and how far history was not rebuilt.
	last := db.index.NewBatch()
	defer func() { _ = last.Close() }()
	hist := make(map[string]uint64, len(front))
	for id, p := range front {
		hist[id] = p.Seq
	}
	_ = last.Set(schema.MetaKey(schema.MetaHistoryFrom), schema.EncodeHistoryFrom(hist), nil)
	matched := 0
	for i := range kept {
		k := &kept[i]
		inState := inSnapTruncated[anchorSeq{k.rec.Anchor, k.rec.Seq}]
		if inState {
			matched++
		}
		// Deletes too, which no snapshot holds (see rebuildAnchor). A
		// superseded version gets no 'k' row, but Record still reads it
		// from its 'r' row, as after a full rebuild.
		if inState || k.rec.Type == segment.TypeDelete {
			schema.KeptRows(k.segno, &k.rec, func(_ byte, key, v []byte) { _ = last.Set(key, v, nil) })
		} else {
			_ = last.Set(schema.KeptKey(k.rec.Anchor, k.rec.Seq), segment.AppendFrame(nil, &k.rec), nil)
		}
	}
	if matched != len(inSnapTruncated) {
		// A truncated record in the snapshot's state that no stub kept:
		// compaction keeps every newest version, so something is off.
		return abandon("%d records of the snapshot's state are truncated and kept by no stub", len(inSnapTruncated)-matched)
	}
	var paths []string
	for _, t := range []*tableWriter{aW, iW, kW, nW, sW} {
		t.finish()
		paths = append(paths, t.paths...)
	}
	if err := done.wait(); err != nil {
		return err
	}
	// The memtable holds no row of these tables' ranges (the index was
	// empty), so they go straight to the bottom level; each tail run then
	// lands in L0, the level above it that Pebble ingests into.
	for _, p := range append([][]string{paths}, tail.runs...) {
		if len(p) == 0 {
			continue
		}
		if err := db.index.Ingest(ctx, p); err != nil {
			return errs.Wrap(errs.CodeWriteFailed, err, "ingest the rebuilt index")
		}
	}
	if err := db.applyBatch(last); err != nil {
		return err
	}
	db.clock.Store(clock)
	db.event(RecoveryEvent{Kind: EventStateFromSnapshot, File: info.Path, Records: records})
	return db.flushIndex()
}

// rebuildVouchers returns the snapshots the audit log records as created
// and not removed since, by name, with their file and state hashes. A log
// whose chain does not verify vouches for nothing (nil, and why); an I/O
// failure is returned.
//
// NB: a rebuild has no index, so no recorded head of the audit log
// (schema.MetaAudit) to tell the database's own lines from ones appended after
// them: every line of the log as it stands counts, as it does for the head
// the rebuilt index adopts (adoptedAuditHead). The chain is unkeyed, so
// someone who can append a well-formed line can still vouch for a forged
// snapshot; what this refuses is a file merely dropped into snapshots/, or
// one rewritten after it was recorded. verify, which replays every
// snapshot the log still can, finds the rest.
func (db *DB) rebuildVouchers() (map[string]snapshot.AuditItem, string, error) {
	created, _, err := db.auditedSnapshotsUpTo(math.MaxUint64)
	if err != nil {
		if errs.CodeOf(err).IsIntegrity() {
			return nil, errs.Message(err), nil
		}
		return nil, "", err
	}
	return created, "", nil
}

// rebuiltAnchor is one anchor's rows, sorted within each table, and its head.
type rebuiltAnchor struct {
	// frCounter is the counter of the record at the snapshot's frontier,
	// tailCounter that of the first after it (when tail is set).
	frCounter, tailCounter uint64
	tail                   bool
	st                     anchorHead
	s, i, n, k             []kv // k: versions of the tail
	kept                   []keptRecord
	records                uint64
}

// keptRecord is a record a stub kept, with the segment it was removed from.
type keptRecord struct {
	segno uint64
	rec   segment.Record
}

// rebuildAnchors lists every anchor directory with its segments and stubs,
// sorted by anchor id (the order of the index tables).
func (db *DB) rebuildAnchors() ([]rebuildAnchor, error) {
	// NB: an entry that is not a directory where the tree has one, or not
	// a regular file where a segment or stub belongs (a FIFO, whose open
	// blocks), is left to the full replay, which reports it: nothing here
	// opens one.
	root := db.fs.PathJoin(db.dir, segment.AnchorsDir)
	fans, err := fsutil.List(db.fs, root)
	if err != nil {
		if oserrorIsNotExist(err) {
			return nil, nil
		}
		if fsutil.IsEntryError(err) {
			return nil, fmt.Errorf("%w: %v", errFastPathAbandoned, err)
		}
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "list %s", root)
	}
	var out []rebuildAnchor
	rc := &reconciler{db: db}
	for _, fan := range fans {
		if len(fan) != 2 || !isHex(fan) {
			return nil, fmt.Errorf("%w: unexpected %s in %s", errFastPathAbandoned, fan, root)
		}
		subs, err := listTreeDir(db.fs, db.fs.PathJoin(root, fan))
		if fsutil.IsEntryError(err) {
			return nil, fmt.Errorf("%w: %v", errFastPathAbandoned, err)
		}
		if err != nil {
			return nil, err
		}
		for _, sub := range subs {
			dir := db.fs.PathJoin(root, fan, sub)
			names, err := listTreeDir(db.fs, dir)
			if fsutil.IsEntryError(err) {
				return nil, fmt.Errorf("%w: %v", errFastPathAbandoned, err)
			}
			if err != nil {
				return nil, err
			}
			ra := rebuildAnchor{dir: dir, stubs: map[uint64]string{}}
			for _, n := range names {
				if _, err := fsutil.Regular(db.fs, db.fs.PathJoin(dir, n), true); err != nil {
					if fsutil.IsEntryError(err) {
						return nil, fmt.Errorf("%w: %v", errFastPathAbandoned, err)
					}
					return nil, errs.Wrap(errs.CodeWriteFailed, err, "stat %s", db.fs.PathJoin(dir, n))
				}
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

// rebuildAnchor reads one anchor's stubs and segments and returns its s, i
// and n rows (sorted), the k rows of its tail (after the snapshot's head
// for the anchor, front) and its head. It runs in a worker; it writes
// nothing. A log whose record at the head's seq is not the head the
// snapshot names is not the snapshot's history: errSnapshotNotOfLog.
func (db *DB) rebuildAnchor(ra rebuildAnchor, front snapshot.Head, buf *[]byte) (rebuiltAnchor, error) {
	var out rebuiltAnchor
	fr := front.Seq
	var frHash segment.Hash // the log's hash at seq fr
	// The s rows, one per record, are cut from shared blocks: one
	// allocation per 64 KiB instead of two per record.
	var arena []byte
	alloc := func(n int) []byte {
		if cap(arena)-len(arena) < n {
			arena = make([]byte, 0, max(n, 64<<10))
		}
		b := arena[len(arena) : len(arena) : len(arena)+n]
		arena = arena[:len(arena)+n]
		return b
	}
	st := &out.st
	*st = anchorHead{headHash: segment.GenesisHash(ra.id)}
	tree := merkleFactory.NewEmptyRange(0)
	var nodes, idems []kv
	visit := func(id compact.NodeID, hash []byte) {
		if treestore.Stored(id.Level) {
			nodes = append(nodes, kv{schema.NodeKey(ra.id, uint8(id.Level), id.Index), slices.Clone(hash)})
		}
	}
	add := func(segno uint64, off int64, size int, rec *segment.Record) {
		se := schema.Location{Segno: segno, Offset: off, Size: uint32(size), Counter: rec.Counter, Hash: rec.Hash}
		out.s = append(out.s, kv{schema.AppendSeqKey(alloc(schema.SeqKeySize(ra.id)), ra.id, rec.Seq), se.Append(alloc(schema.LocationSize))})
		leaf := segment.LeafHash(rec.Hash)
		_ = tree.Append(leaf[:], visit)
		if len(rec.IdempotencyKey) > 0 {
			ie := schema.Idem{Seq: rec.Seq, Counter: rec.Counter, Hash: rec.Hash, Fingerprint: segment.Fingerprint(rec.Type, rec.Key, rec.Value)}
			idems = append(idems, kv{schema.IdemKey(ra.id, rec.IdempotencyKey), ie.Append(nil)})
		}
		switch {
		case rec.Seq > fr && rec.IsKV():
			// The tail: its versions are not in the snapshot.
			ve := schema.Version{Type: schema.VersionPut, Seq: rec.Seq, Time: rec.Time, Hash: rec.Hash, Segno: segno, Offset: off, Size: uint32(size)}
			if rec.Type == segment.TypeDelete {
				ve.Type = schema.VersionDelete
			} else if len(rec.Value) <= db.opts.InlineValueMax {
				ve.Inline, ve.Value = true, rec.Value
			}
			out.k = append(out.k, kv{schema.VersionKey(rec.Key, rec.Counter, rec.Anchor), ve.Append(nil)})
		case rec.Type == segment.TypeDelete:
			// A snapshot holds no deletes, and a key's newest version up to
			// the frontier may be one: without its row, a record that sorts
			// before it (a caller's counter, an ingest) or a version a
			// truncation keeps would stand as the key's newest. Like the
			// snapshot's rows it names no location (the 's' row has it).
			ve := schema.Version{Type: schema.VersionDelete, Seq: rec.Seq, Time: rec.Time, Hash: rec.Hash}
			out.k = append(out.k, kv{schema.VersionKey(rec.Key, rec.Counter, rec.Anchor), ve.Append(nil)})
		}
		st.head, st.headHash, st.lastCounter = rec.Seq, rec.Hash, rec.Counter
		if rec.Seq == fr {
			frHash, out.frCounter = rec.Hash, rec.Counter
		}
		if rec.Seq == fr+1 {
			out.tail, out.tailCounter = true, rec.Counter
		}
		out.records++
	}
	// Stubs first (a truncated log), then segments.
	first := ra.segs[0].segno
	for segno := uint64(1); segno < first; segno++ {
		path, ok := ra.stubs[segno]
		if !ok {
			return out, fmt.Errorf("%w: segment %d has neither file nor stub", errFastPathAbandoned, segno)
		}
		buf, err := readWhole(db.fs, path)
		if err != nil {
			return out, err
		}
		stub, err := segment.ParseStub(buf)
		if err != nil || stub.FirstSeq != st.head+1 || stub.PrevHash != st.headHash {
			return out, fmt.Errorf("%w: stub %s does not continue the chain", errFastPathAbandoned, path)
		}
		for i, h := range stub.Hashes {
			rec := segment.Record{Seq: stub.FirstSeq + uint64(i), Hash: h, Counter: stub.Counters[i]}
			se := schema.Location{Segno: segno, Hash: h, Counter: rec.Counter}
			out.s = append(out.s, kv{schema.SeqKey(ra.id, rec.Seq), se.Append(nil)})
			leaf := segment.LeafHash(h)
			_ = tree.Append(leaf[:], visit)
			st.head, st.headHash, st.lastCounter = rec.Seq, h, rec.Counter
			if rec.Seq == fr {
				frHash, out.frCounter = h, rec.Counter
			}
			if rec.Seq == fr+1 {
				out.tail, out.tailCounter = true, rec.Counter
			}
		}
		// Idempotency keys go to the sorted i table. Kept records wait for
		// the snapshot: only those still in its state are indexed (one that
		// a record up to the frontier superseded is history, not rebuilt).
		for _, e := range stub.Idem {
			ie := schema.Idem{Seq: e.Seq, Counter: e.Counter, Hash: stub.HashAt(e.Seq), Fingerprint: e.Fingerprint}
			idems = append(idems, kv{schema.IdemKey(ra.id, e.Key), ie.Append(nil)})
		}
		for _, rec := range stub.Kept {
			out.kept = append(out.kept, keptRecord{segno: segno, rec: rec})
		}
	}
	for i, sf := range ra.segs {
		if sf.segno != first+uint64(i) {
			return out, fmt.Errorf("%w: segment %d is missing", errFastPathAbandoned, first+uint64(i))
		}
		f, err := db.fs.Open(sf.path)
		if err != nil {
			return out, errs.Wrap(errs.CodeWriteFailed, err, "open %s", sf.path)
		}
		info, err := f.Stat()
		if err != nil {
			f.Close()
			return out, errs.Wrap(errs.CodeWriteFailed, err, "stat %s", sf.path)
		}
		sc, err := segment.NewScannerBuffer(f, info.Size(), *buf)
		if err != nil {
			f.Close()
			return out, fmt.Errorf("%w: %v", errFastPathAbandoned, err)
		}
		h := sc.Header
		if h.Anchor != ra.id || h.Segno != sf.segno || h.FirstSeq != st.head+1 || h.PrevHash != st.headHash {
			f.Close()
			return out, fmt.Errorf("%w: %s does not continue the chain", errFastPathAbandoned, sf.path)
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
				return out, fmt.Errorf("%w: %v", errFastPathAbandoned, err)
			}
			rec := fr2.Record
			if rec.Seq > fr && rec.ComputeHash() != rec.Hash {
				f.Close()
				return out, fmt.Errorf("%w: record %d does not hash to its hash", errFastPathAbandoned, rec.Seq)
			}
			add(sf.segno, fr2.Offset, fr2.Size, &rec)
		}
		sealed := sc.Footer() != nil
		*buf = sc.Buffer()
		f.Close()
		if !sealed && i < len(ra.segs)-1 {
			return out, fmt.Errorf("%w: %s is not sealed", errFastPathAbandoned, sf.path)
		}
		if sealed {
			st.segno, st.segFirst = sf.segno+1, st.head+1
		}
	}
	if st.head < fr {
		return out, fmt.Errorf("%w: the log ends at seq %d, before the snapshot's frontier %d", errFastPathAbandoned, st.head, fr)
	}
	if fr > 0 && frHash != front.Hash {
		return out, fmt.Errorf("%w: anchor %q seq %d is %s in the log, %s in the snapshot", errSnapshotNotOfLog, ra.id, fr, frHash, front.Hash)
	}
	slices.SortFunc(nodes, func(a, b kv) int { return bytes.Compare(a.k, b.k) })
	slices.SortFunc(idems, func(a, b kv) int { return bytes.Compare(a.k, b.k) })
	out.n, out.i = nodes, idems
	return out, nil
}

func readWhole(fs vfs.FS, path string) ([]byte, error) {
	f, err := fsutil.Open(fs, path, false)
	if err != nil {
		return nil, entryErr(err, errs.CodeChainBroken, "open "+path)
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

// loadHistoryFrom reads the schema.MetaHistoryFrom row; none means every version is
// indexed.
func loadHistoryFrom(r pebble.Reader) (map[string]uint64, error) {
	v, closer, err := r.Get(schema.MetaKey(schema.MetaHistoryFrom))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "read index")
	}
	defer closer.Close()
	m, err := schema.DecodeHistoryFrom(v)
	if err != nil {
		// The row's own text, with the code: a damaged row of the index.
		return nil, errs.New(errs.CodeIndexMismatch, "%s", err)
	}
	return m, nil
}

// segmentFirstSeq reads the first seq from a segment's header.
func segmentFirstSeq(fs vfs.FS, path string) (uint64, error) {
	f, err := fsutil.Open(fs, path, false)
	if err != nil {
		return 0, entryErr(err, errs.CodeChainBroken, "open "+path)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return 0, errs.Wrap(errs.CodeWriteFailed, err, "stat %s", path)
	}
	sc, err := segment.NewScanner(f, info.Size())
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %v", errFastPathAbandoned, path, err)
	}
	return sc.Header.FirstSeq, nil
}
