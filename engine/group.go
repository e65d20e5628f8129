package engine

import (
	"errors"
	"fmt"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/transparency-dev/merkle/compact"
)

// group is one commit group under construction: an overlay of the anchors it
// touches, the segment bytes to write and the index batch to apply. Nothing
// it holds is visible until commitGroup publishes it.
type group struct {
	db      *DB
	batch   *pebble.Batch
	pending map[*anchor]*pendingAnchor
	order   []*pendingAnchor // first-touch order: the order segment writes happen in

	clock      uint64 // the Lamport clock: highest counter seen
	records    int
	duplicates bool
	idem       map[string]idemEntry // idempotency keys claimed in this group
	prepared   []preparedRecord     // records of the request being prepared
	scratch    []byte
}

// pendingAnchor is a group's working copy of one anchor.
type pendingAnchor struct {
	a *anchor
	anchorHead
	tree      *compact.Range // cloned on first append in the group
	writes    []segWrite
	metaDirty bool
}

// segWrite is a run of bytes for one segment file at one offset.
type segWrite struct {
	segno  uint64
	offset int64
	buf    []byte
	create bool // buf opens with the header: create the file
	seal   bool // buf ends with the seal: fsync the file after writing
}

// preparedRecord is a validated record waiting for its request to succeed
// before it is emitted into the batch.
type preparedRecord struct {
	p        *pendingAnchor
	rec      segment.Record
	segno    uint64
	offset   int64 // file offset of the frame
	write    int   // index in p.writes
	bufStart int   // position of the frame in that write's buf
	size     int
}

func (db *DB) newGroup() *group {
	return &group{
		db:      db,
		batch:   db.index.NewBatch(),
		pending: make(map[*anchor]*pendingAnchor),
		clock:   db.clock.Load(),
	}
}

// commitGroup prepares, writes and applies a group. It returns a function
// that waits for the group's durability (a no-op without sync).
func (db *DB) commitGroup(reqs []*request) (wait func() error) {
	noWait := func() error { return nil }
	// Closing is enforced by admission (Close drains it first); a failed
	// database commits nothing, not even a settle.
	if f := db.failed.Load(); f != nil {
		for _, r := range reqs {
			r.err = f
		}
		return noWait
	}
	g := db.newGroup()
	sync := false
	var marks []*settleMark
	for _, r := range reqs {
		if r.settle != nil {
			marks = append(marks, r.settle)
			continue
		}
		g.prepareRequest(r)
		if r.err == nil && r.sync {
			sync = true
		}
	}
	fail := func(err error) func() error {
		_ = g.batch.Close()
		err = db.fail(err)
		for _, r := range reqs {
			if r.err == nil {
				r.err, r.receipts = err, nil
			}
		}
		return noWait
	}
	if err := g.writeSegments(); err != nil {
		return fail(err)
	}
	for _, m := range marks {
		db.captureSettle(m)
	}
	if g.records == 0 && !(g.duplicates && sync) {
		_ = g.batch.Close()
		return noWait
	}
	for _, p := range g.order {
		if p.metaDirty {
			meta := anchorMeta{ActiveSegno: p.segno, ActiveFirstSeq: p.segFirst}
			_ = g.batch.Set(anchorKey(p.a.id), meta.encode(g.scratch[:0]), nil)
			p.stored = true
		}
	}
	_ = g.batch.Set(metaKey(metaClock), be.AppendUint64(nil, g.clock), nil)
	if err := db.applyBatch(g.batch, sync); err != nil {
		return fail(err)
	}
	g.publish()
	db.maybeSettle()
	if !sync {
		_ = g.batch.Close()
		return noWait
	}
	b := g.batch
	return func() error {
		err := b.SyncWait()
		_ = b.Close()
		if err != nil {
			return db.fail(errs.Wrap(errs.CodeWriteFailed, err, "index WAL sync"))
		}
		return nil
	}
}

// applyBatch applies b to the index. Pebble treats a failed commit as fatal;
// its logger turns that into a panic we recover here as IO_001.
func (db *DB) applyBatch(b *pebble.Batch, sync bool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			pf, ok := r.(pebbleFatal)
			if !ok {
				panic(r)
			}
			err = errs.New(errs.CodeWriteFailed, "index: %s", string(pf))
		}
	}()
	if sync {
		err = db.index.ApplyNoSyncWait(b, pebble.Sync)
	} else {
		err = db.index.Apply(b, pebble.NoSync)
	}
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "index apply")
	}
	return nil
}

func (g *group) pendingFor(a *anchor) *pendingAnchor {
	if p := g.pending[a]; p != nil {
		return p
	}
	p := &pendingAnchor{a: a, anchorHead: a.snapshot()}
	g.pending[a] = p
	g.order = append(g.order, p)
	return p
}

// requestUndo restores a group's overlay when a multi-record request fails
// part way: every record of a request is appended, or none.
type requestUndo struct {
	heads    map[*pendingAnchor]pendingSnap
	nOrder   int
	clock    uint64
	idemKeys []string
}

type pendingSnap struct {
	head      anchorHead
	nWrites   int
	lastLen   int
	lastSeal  bool
	metaDirty bool
}

func (u *requestUndo) touch(p *pendingAnchor) {
	if _, ok := u.heads[p]; ok {
		return
	}
	s := pendingSnap{head: p.anchorHead, nWrites: len(p.writes), metaDirty: p.metaDirty}
	if n := len(p.writes); n > 0 {
		s.lastLen, s.lastSeal = len(p.writes[n-1].buf), p.writes[n-1].seal
	}
	u.heads[p] = s
}

func (g *group) undo(u *requestUndo) {
	for p, s := range u.heads {
		p.anchorHead, p.metaDirty = s.head, s.metaDirty
		p.writes = p.writes[:s.nWrites]
		if n := len(p.writes); n > 0 {
			p.writes[n-1].buf = p.writes[n-1].buf[:s.lastLen]
			p.writes[n-1].seal = s.lastSeal
		}
	}
	for _, p := range g.order[u.nOrder:] {
		delete(g.pending, p.a)
	}
	g.order = g.order[:u.nOrder]
	g.clock = u.clock
	for _, k := range u.idemKeys {
		delete(g.idem, k)
	}
}

// prepareRequest validates and places every record of r in the overlay, then
// emits them into the batch. On any refusal the overlay is restored and r
// fails as a whole.
func (g *group) prepareRequest(r *request) {
	var u *requestUndo
	if len(r.entries) > 1 {
		u = &requestUndo{heads: make(map[*pendingAnchor]pendingSnap), nOrder: len(g.order), clock: g.clock}
	}
	g.prepared = g.prepared[:0]
	receipts := make([]Receipt, len(r.entries))
	for i := range r.entries {
		rc, err := g.prepareRecord(&r.entries[i], u)
		if err != nil {
			if u != nil {
				g.undo(u)
				err = fmt.Errorf("entry %d: %w", i, err)
			}
			r.err = err
			return
		}
		receipts[i] = rc
	}
	for i := range g.prepared {
		g.emit(&g.prepared[i])
	}
	r.receipts = receipts
}

func (g *group) prepareRecord(e *Entry, u *requestUndo) (Receipt, error) {
	db := g.db
	a, err := db.getAnchor(e.Anchor, true)
	if err != nil {
		return Receipt{}, err
	}
	if d := a.damaged(); d != nil {
		return Receipt{}, d
	}
	p := g.pendingFor(a)
	if u != nil {
		u.touch(p)
	}

	var fp segment.Hash
	var ik string
	if len(e.IdempotencyKey) > 0 {
		fp = segment.Fingerprint(e.Type, e.Key, e.Value)
		ik = e.Anchor + "\x00" + string(e.IdempotencyKey)
		prior, found := g.idem[ik]
		if !found {
			if prior, found, err = db.lookupIdem(e.Anchor, e.IdempotencyKey); err != nil {
				return Receipt{}, err
			}
		}
		if found {
			rc := Receipt{Anchor: e.Anchor, Seq: prior.Seq, Counter: prior.Counter, Hash: prior.Hash, Duplicate: true}
			if prior.Fingerprint != fp {
				return Receipt{}, newConflict(rc, prior.Fingerprint, fp, e.IdempotencyKey)
			}
			g.duplicates = true
			return rc, nil
		}
	}

	var counter uint64
	if e.Counter != 0 {
		if e.Counter <= p.lastCounter {
			err := errs.New(errs.CodeConflict, "counter %d is not above anchor %q's last counter %d", e.Counter, e.Anchor, p.lastCounter)
			err.Anchor = e.Anchor
			return Receipt{}, err
		}
		counter = e.Counter
	} else {
		counter = max(p.lastCounter, g.clock) + 1
		if counter > MaxCounter {
			return Receipt{}, errs.New(errs.CodeConflict, "the Lamport clock is exhausted at %d", g.clock)
		}
	}

	// From here on nothing can fail: the record is placed.
	t := e.Time
	if t.IsZero() {
		t = db.opts.Clock()
	}
	rec := segment.Record{
		Anchor: e.Anchor, Seq: p.head + 1, Counter: counter, Time: t.UnixNano(),
		Type: e.Type, Key: e.Key, Value: e.Value, IdempotencyKey: e.IdempotencyKey,
		PrevHash: p.headHash,
	}
	size := rec.FrameSize()
	if p.segno == 0 {
		p.segno, p.segFirst, p.metaDirty = 1, 1, true
	} else if p.segSize > 0 && p.segCount > 0 && p.segSize+int64(size) > db.opts.SegmentSize {
		g.seal(p)
	}
	if p.segSize == 0 {
		g.startSegment(p)
	}
	w := g.writeFor(p)
	wi := len(p.writes) - 1
	start := len(w.buf)
	w.buf = segment.AppendFrame(w.buf, &rec)
	g.prepared = append(g.prepared, preparedRecord{p: p, rec: rec, segno: p.segno, offset: p.segSize, write: wi, bufStart: start, size: size})

	p.head, p.headHash, p.lastCounter = rec.Seq, rec.Hash, counter
	p.segSize += int64(size)
	p.segCount++
	g.clock = max(g.clock, counter)
	if ik != "" {
		if g.idem == nil {
			g.idem = make(map[string]idemEntry)
		}
		g.idem[ik] = idemEntry{Seq: rec.Seq, Counter: counter, Hash: rec.Hash, Fingerprint: fp}
		if u != nil {
			u.idemKeys = append(u.idemKeys, ik)
		}
	}
	return Receipt{Anchor: e.Anchor, Seq: rec.Seq, Counter: counter, Hash: rec.Hash}, nil
}

// seal ends the active segment with its footer; the next record starts a
// new segment.
func (g *group) seal(p *pendingAnchor) {
	f := segment.Footer{LastSeq: p.head, Count: p.segCount, LastHash: p.headHash}
	w := g.writeFor(p)
	w.buf = segment.AppendFooter(w.buf, &f, p.segHeader)
	w.seal = true
	p.segno++
	p.segFirst = p.head + 1
	p.segSize, p.segCount = 0, 0
	p.metaDirty = true
}

// startSegment opens a new segment file with its header.
func (g *group) startSegment(p *pendingAnchor) {
	h := segment.Header{Anchor: p.a.id, Segno: p.segno, FirstSeq: p.head + 1, PrevHash: p.headHash}
	p.writes = append(p.writes, segWrite{segno: p.segno, offset: 0, create: true})
	w := &p.writes[len(p.writes)-1]
	w.buf = segment.AppendHeader(w.buf, &h)
	p.segHeader = h.Checksum
	p.segSize = int64(len(w.buf))
}

// writeFor returns the write run that continues the active segment.
func (g *group) writeFor(p *pendingAnchor) *segWrite {
	if n := len(p.writes); n > 0 && p.writes[n-1].segno == p.segno && !p.writes[n-1].seal {
		return &p.writes[n-1]
	}
	p.writes = append(p.writes, segWrite{segno: p.segno, offset: p.segSize})
	return &p.writes[len(p.writes)-1]
}

// emit writes a prepared record's index rows into the batch and extends the
// anchor's tree.
func (g *group) emit(pr *preparedRecord) {
	db, rec, p := g.db, &pr.rec, pr.p
	frame := p.writes[pr.write].buf[pr.bufStart : pr.bufStart+pr.size]
	lsn := db.nextLSN
	db.nextLSN++
	je := journalEntry{Anchor: rec.Anchor, Segno: pr.segno, Offset: pr.offset, Frame: frame}
	g.scratch = je.encode(g.scratch[:0])
	_ = g.batch.Set(journalKey(lsn), g.scratch, nil)
	db.journalBytes += int64(len(frame))

	g.scratch = indexRecord(g.batch, rec, pr.segno, pr.offset, pr.size, db.opts.InlineValueMax, g.scratch)

	if p.tree == nil {
		p.tree = cloneRange(p.a)
	}
	leaf := segment.LeafHash(rec.Hash)
	_ = p.tree.Append(leaf[:], treeAppender{batch: g.batch, anchor: rec.Anchor}.visit)
	g.records++
}

func cloneRange(a *anchor) *compact.Range {
	a.mu.RLock()
	defer a.mu.RUnlock()
	hs := append([][]byte(nil), a.tree.Hashes()...)
	r, err := merkleFactory.NewRange(a.tree.Begin(), a.tree.End(), hs)
	if err != nil {
		panic(fmt.Sprintf("anchordb: cloning a valid compact range failed: %v", err))
	}
	return r
}

// writeSegments writes every run of segment bytes of the group, in order.
// Seals are fsynced at once: a sealed segment is immutable and durable before
// its successor receives a byte, so recovery never meets a newer segment
// behind an unsealed one.
func (g *group) writeSegments() error {
	for _, p := range g.order {
		for i := range p.writes {
			w := &p.writes[i]
			if len(w.buf) == 0 {
				continue
			}
			if err := g.db.writeSegment(p.a, w); err != nil {
				return err
			}
		}
	}
	return nil
}

func (db *DB) writeSegment(a *anchor, w *segWrite) error {
	path := db.segmentPath(a, w.segno)
	if w.create {
		if err := db.ensureAnchorDir(a); err != nil {
			return err
		}
		if _, err := db.fs.Stat(path); err == nil {
			return errs.New(errs.CodeIndexMismatch, "segment %s exists but the index says it is new", path).At(a.id, 0, path, 0)
		}
	}
	cf, err := db.files.acquire(path, true, w.create)
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "open segment %s", path)
	}
	_, err = cf.file.WriteAt(w.buf, w.offset)
	if err == nil && w.seal {
		err = cf.file.Sync()
	}
	db.files.release(cf)
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "write segment %s at %d", path, w.offset)
	}
	db.dirtyMu.Lock()
	if w.create {
		db.dirtyDirs[a.dir] = struct{}{}
	}
	if w.seal {
		delete(db.dirtyFiles, path)
	} else {
		db.dirtyFiles[path] = struct{}{}
	}
	db.dirtyMu.Unlock()
	if w.seal {
		db.files.forget(path) // reopened read-only when next read
	}
	return nil
}

// ensureAnchorDir creates the anchor's directory once and marks the
// directories whose entries changed for the next settle.
func (db *DB) ensureAnchorDir(a *anchor) error {
	if a.dirReady {
		return nil
	}
	if err := db.fs.MkdirAll(a.dir, 0o755); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "create anchor directory %s", a.dir)
	}
	// MkdirAll may have created the fan-out directory and anchors/ as well:
	// every entry up to the database root must reach the disk.
	fan := db.fs.PathDir(a.dir)
	anchors := db.fs.PathDir(fan)
	db.dirtyMu.Lock()
	db.dirtyDirs[fan] = struct{}{}
	db.dirtyDirs[anchors] = struct{}{}
	db.dirtyDirs[db.fs.PathDir(anchors)] = struct{}{}
	db.dirtyMu.Unlock()
	a.mu.Lock()
	a.dirReady = true
	a.mu.Unlock()
	return nil
}

// publish makes the group's overlay the anchors' state.
func (g *group) publish() {
	for _, p := range g.order {
		a := p.a
		a.mu.Lock()
		a.anchorHead = p.anchorHead
		if p.tree != nil {
			a.tree = p.tree
		}
		a.mu.Unlock()
	}
	g.db.clock.Store(g.clock)
}

func (db *DB) lookupIdem(anchor string, key []byte) (idemEntry, bool, error) {
	v, closer, err := db.index.Get(idemKey(anchor, key))
	if errors.Is(err, pebble.ErrNotFound) {
		return idemEntry{}, false, nil
	}
	if err != nil {
		return idemEntry{}, false, errs.Wrap(errs.CodeWriteFailed, err, "read idempotency key")
	}
	defer closer.Close()
	e, err := decodeIdemEntry(v)
	if err != nil {
		return e, false, errs.Wrap(errs.CodeIndexMismatch, err, "anchor %q idempotency key", anchor)
	}
	return e, true, nil
}

func newConflict(original Receipt, existing, requested segment.Hash, key []byte) *ConflictError {
	ex, rq := segment.ShortHex(existing, 8), segment.ShortHex(requested, 8)
	e := errs.New(errs.CodeConflict, "idempotency key %q was used for another request (seq %d): fingerprint %s, this request %s",
		key, original.Seq, ex, rq)
	e.Anchor, e.Seq = original.Anchor, original.Seq
	return &ConflictError{Original: original, Existing: ex, Requested: rq, err: e}
}
