package engine

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/invariants"
	"github.com/anchordb/anchordb/internal/journal"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/transparency-dev/merkle/compact"
)

// group is one commit group: an overlay of the anchors it touches, its
// journal block, the segment bytes to write and the index batch to apply.
// The leader builds it (buildGroup); the applier applies it (applyGroup).
type group struct {
	db      *DB
	id      uint64 // groups are numbered in journal order, from 1
	reqs    []*request
	early   bool // its callers were woken before the apply (commit.go)
	batch   *pebble.Batch
	pending map[*anchor]*pendingAnchor
	order   []*pendingAnchor // first-touch order: the order segment writes happen in

	clock      uint64 // the Lamport clock: highest counter seen
	records    int
	duplicates bool
	idem       map[string]schema.Idem // idempotency keys claimed in this group
	versions   versionRows            // the 'k' rows, set into batch in key order when the group is built
	prepared   []preparedRecord       // records of the request being prepared
	scratch    []byte
	block      []byte // the journal block: header room, count, records
	spares     []*pendingAnchor

	sync  bool
	end   journal.Pos // journal position after this group
	marks []*settleMark
	err   error // set when the group failed as a whole
}

// pendingAnchor is a group's working copy of one anchor.
type pendingAnchor struct {
	a *anchor
	anchorHead
	leaves    []segment.Hash // record hashes for the Merkle tree, added by the applier
	tree      *compact.Range // the anchor's range after this group, built by the applier
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

// Groups and their buffers are reused: a busy database builds one per
// commit, and most of a group's cost would otherwise be allocation.
var groupPool = sync.Pool{New: func() any { return &group{pending: make(map[*anchor]*pendingAnchor)} }}

func (db *DB) newGroup(reqs []*request) *group {
	g := groupPool.Get().(*group)
	g.db, g.reqs, g.batch, g.clock = db, reqs, db.index.NewBatch(), db.clock.Load()
	var hdr [journal.HeaderSize + 4]byte
	g.block = append(g.block[:0], hdr[:]...)
	return g
}

// release returns the group to the pool once every request is complete.
func (g *group) release() {
	for _, p := range g.order {
		p.a, p.tree, p.leaves = nil, nil, p.leaves[:0]
		for i := range p.writes {
			p.writes[i].buf = p.writes[i].buf[:0]
		}
		p.writes = p.writes[:0]
		g.spares = append(g.spares, p)
	}
	clear(g.pending)
	clear(g.idem)
	g.order = g.order[:0]
	g.prepared = g.prepared[:0]
	g.versions.reset()
	g.marks = g.marks[:0]
	g.db, g.reqs, g.batch, g.err = nil, nil, nil, nil
	g.records, g.duplicates, g.sync, g.end = 0, false, false, journal.Pos{}
	g.id, g.early = 0, false
	if cap(g.block) > 1<<20 {
		g.block = nil
	}
	groupPool.Put(g)
}

// commitEnv is the database's side of the commit pipeline (commit.go):
// groups are built here and applied in apply.go.
func (db *DB) commitEnv() commitEnv {
	return commitEnv{
		build: db.buildGroup,
		syncTo: func(end journal.Pos) error {
			start := time.Now()
			err := db.journal.SyncTo(end)
			db.metrics.syncMicros.record(uint64(time.Since(start).Microseconds()))
			db.metrics.journalSyncs.Add(1)
			return err
		},
		apply:   db.applyGroups,
		release: (*group).release,
		failed: func() error {
			if f := db.failed.Load(); f != nil {
				return f
			}
			return nil
		},
		fail: db.fail,
	}
}

// buildGroup runs in the leader: it validates and places every record of the
// requests, writes the group's journal block, and advances the leader's head
// of every anchor touched. The group is then ready for the applier.
func (db *DB) buildGroup(id uint64, reqs []*request) *group {
	g := db.newGroup(reqs)
	g.id = id
	if f := db.failed.Load(); f != nil {
		g.err = f
		return g
	}
	for _, r := range reqs {
		if r.settle != nil {
			g.marks = append(g.marks, r.settle)
			continue
		}
		g.prepareRequest(r)
		if r.err == nil && r.sync {
			g.sync = true
		}
	}
	g.versions.setSorted(g.batch)
	g.stageDamage()
	for _, p := range g.order {
		if p.metaDirty {
			meta := anchorMetaOf(p.a, p.anchorHead)
			_ = g.batch.Set(schema.AnchorKey(p.a.id), meta.Append(g.scratch[:0]), nil)
			p.stored = true
		}
	}
	if g.records > 0 {
		be.PutUint32(g.block[journal.HeaderSize:], uint32(g.records))
		journal.Frame(g.block, db.journal.Gen())
		var end journal.Pos
		if g.sync {
			// The applier writes and fsyncs it, with every group behind it.
			end = db.journal.AppendBuffered(g.block)
		} else {
			// NoSync: the block reaches the OS before the append returns.
			var err error
			if end, err = db.journal.Append(g.block); err != nil {
				g.err = db.fail(errs.Wrap(errs.CodeWriteFailed, err, "journal"))
				return g
			}
		}
		db.journalBytes += int64(len(g.block))
		g.end = end
		db.metrics.groups.Add(1)
		db.metrics.records.Add(uint64(g.records))
		db.metrics.groupRecords.record(uint64(g.records))
		db.metrics.journalBytes.Add(uint64(len(g.block)))
	} else {
		g.end = db.journal.End()
	}
	if invariants.Enabled {
		db.checkBuiltGroup(g)
	}
	// The next group continues from here, whether or not this one is applied
	// yet.
	for _, p := range g.order {
		p.a.anchorHead = p.anchorHead
	}
	if len(g.idem) > 0 {
		db.idemMu.Lock()
		for k, v := range g.idem {
			db.pendingIdem[k] = pendingIdem{Idem: v, group: g.id}
		}
		db.idemMu.Unlock()
	}
	db.clock.Store(g.clock)
	if len(g.marks) > 0 {
		if err := db.rotateForSettle(g); err != nil {
			g.err = db.fail(err)
		}
	}
	if db.journalBytes >= db.opts.SettleBytes {
		select {
		case db.settleCh <- struct{}{}:
		default:
		}
	}
	return g
}

func (g *group) pendingFor(a *anchor) *pendingAnchor {
	if p := g.pending[a]; p != nil {
		return p
	}
	var p *pendingAnchor
	if n := len(g.spares); n > 0 {
		p, g.spares = g.spares[n-1], g.spares[:n-1]
	} else {
		p = &pendingAnchor{}
	}
	p.a, p.anchorHead, p.metaDirty = a, a.anchorHead, false
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
	if r.verbatim != nil {
		g.prepareVerbatimRequest(r)
		return
	}
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

// prepareVerbatimRequest is prepareRequest for ingested records.
func (g *group) prepareVerbatimRequest(r *request) {
	u := &requestUndo{heads: make(map[*pendingAnchor]pendingSnap), nOrder: len(g.order), clock: g.clock}
	g.prepared = g.prepared[:0]
	receipts := make([]Receipt, len(r.verbatim))
	for i := range r.verbatim {
		rc, err := g.prepareVerbatim(r.verbatim[i], u)
		if err != nil {
			g.undo(u)
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
	if err := db.checkActiveSegment(a); err != nil {
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
			db.idemMu.Lock()
			var pi pendingIdem
			pi, found = db.pendingIdem[ik]
			prior = pi.Idem
			db.idemMu.Unlock()
		}
		if !found {
			if prior, found, err = db.lookupIdem(e.Anchor, e.IdempotencyKey); err != nil {
				return Receipt{}, err
			}
		}
		if found {
			rc := duplicateOf(prior, e.Anchor)
			if prior.Fingerprint != fp {
				return Receipt{}, newConflict(rc, prior.Fingerprint, fp, e.IdempotencyKey)
			}
			g.duplicates = true
			return rc, nil
		}
	}
	// An anchor being ingested takes no new record (ingest.go): its head
	// must stay the one the ingest checked. A retry of a record it holds
	// moves nothing and was answered above (SPEC §7).
	if held := db.ingesting.Load(); held != nil && (*held)[e.Anchor] {
		err := errs.New(errs.CodeScopeLocked, "anchor %q is being ingested: its log is arriving from another database; append to it once the ingest ends", e.Anchor)
		err.Anchor = e.Anchor
		return Receipt{}, err
	}

	var counter uint64
	if e.Counter != 0 {
		if e.Counter > MaxCallerCounter {
			return Receipt{}, counterTooLarge(e.Counter) // not a retry (CheckCallerCounter)
		}
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
	g.place(p, &rec, fp, ik, u)
	return Receipt{Anchor: e.Anchor, Seq: rec.Seq, Counter: counter, Hash: rec.Hash}, nil
}

// place writes rec (seq, counter, prev_hash set; hash computed here) into the
// anchor's segment runs, sealing and starting segments as needed, and
// advances the group's overlay of the anchor. It cannot fail.
func (g *group) place(p *pendingAnchor, rec *segment.Record, fp segment.Hash, ik string, u *requestUndo) {
	size := rec.FrameSize()
	if p.segno == 0 {
		p.segno, p.segFirst, p.metaDirty = 1, 1, true
	} else if p.segSize > 0 && p.segCount > 0 && p.segSize+int64(size) > g.db.opts.SegmentSize {
		g.seal(p)
	}
	if p.segSize == 0 {
		g.startSegment(p)
	}
	w := g.writeFor(p)
	wi := len(p.writes) - 1
	start := len(w.buf)
	w.buf = segment.AppendFrame(w.buf, rec)
	g.prepared = append(g.prepared, preparedRecord{p: p, rec: *rec, segno: p.segno, offset: p.segSize, write: wi, bufStart: start, size: size})

	p.head, p.headHash, p.lastCounter = rec.Seq, rec.Hash, rec.Counter
	p.segSize += int64(size)
	p.segCount++
	g.clock = max(g.clock, rec.Counter)
	if ik != "" {
		if g.idem == nil {
			g.idem = make(map[string]schema.Idem)
		}
		g.idem[ik] = schema.Idem{Seq: rec.Seq, Counter: rec.Counter, Hash: rec.Hash, Fingerprint: fp}
		if u != nil {
			u.idemKeys = append(u.idemKeys, ik)
		}
	}
}

// prepareVerbatim places a record written elsewhere (ingest) exactly as it
// is: it must continue the anchor's chain — next seq, linked prev_hash, a
// higher counter — and its content must hash to its hash.
func (g *group) prepareVerbatim(rec segment.Record, u *requestUndo) (Receipt, error) {
	db := g.db
	a, err := db.getAnchor(rec.Anchor, true)
	if err != nil {
		return Receipt{}, err
	}
	if err := db.checkActiveSegment(a); err != nil {
		return Receipt{}, err
	}
	if d := a.damaged(); d != nil {
		return Receipt{}, d
	}
	p := g.pendingFor(a)
	if u != nil {
		u.touch(p)
	}
	refuse := func(code errs.Code, format string, args ...any) (Receipt, error) {
		e := errs.New(code, format, args...)
		e.Anchor, e.Seq = rec.Anchor, rec.Seq
		return Receipt{}, e
	}
	switch {
	case rec.Seq != p.head+1:
		return refuse(errs.CodeConflict, "record seq %d of anchor %q does not follow its head (seq %d)", rec.Seq, rec.Anchor, p.head)
	case rec.PrevHash != p.headHash:
		return refuse(errs.CodeConflict, "record seq %d of anchor %q does not link to its head %s: a fork", rec.Seq, rec.Anchor, p.headHash)
	case rec.Counter <= p.lastCounter || rec.Counter > MaxCounter:
		return refuse(errs.CodeConflict, "record seq %d of anchor %q has counter %d, not above %d", rec.Seq, rec.Anchor, rec.Counter, p.lastCounter)
	case rec.ComputeHash() != rec.Hash:
		return refuse(errs.CodeHashMismatch, "record seq %d of anchor %q does not hash to its stored hash", rec.Seq, rec.Anchor)
	}
	var fp segment.Hash
	var ik string
	if len(rec.IdempotencyKey) > 0 {
		fp = segment.Fingerprint(rec.Type, rec.Key, rec.Value)
		ik = rec.Anchor + "\x00" + string(rec.IdempotencyKey)
		_, found := g.idem[ik]
		if !found {
			db.idemMu.Lock()
			_, found = db.pendingIdem[ik]
			db.idemMu.Unlock()
		}
		if !found {
			if _, found, err = db.lookupIdem(rec.Anchor, rec.IdempotencyKey); err != nil {
				return Receipt{}, err
			}
		}
		if found {
			return refuse(errs.CodeConflict, "record seq %d of anchor %q reuses idempotency key %q", rec.Seq, rec.Anchor, rec.IdempotencyKey)
		}
	}
	// place re-encodes the record; the encoding is canonical, so the hash it
	// computes is the one just checked.
	g.place(p, &rec, fp, ik, u)
	return Receipt{Anchor: rec.Anchor, Seq: rec.Seq, Counter: rec.Counter, Hash: rec.Hash}, nil
}

// checkActiveSegment runs once per anchor per session, before the first
// append to it: its active segment file must be exactly as long as the index
// says. An index ahead of the file (restored from a backup, or a file cut
// short) would otherwise have the append written past a hole; an index
// behind it would overwrite records. Either is damage: reported, and the
// anchor made read-only.
func (db *DB) checkActiveSegment(a *anchor) error {
	if a.activeChecked {
		return nil
	}
	a.activeChecked = true
	if a.segno == 0 || a.segSize == 0 {
		return nil // nothing written yet, or the next segment is not created
	}
	a.wmu.Lock()
	pending := len(a.wbuf.buf) > 0
	a.wmu.Unlock()
	if pending {
		return nil // this session already wrote to it
	}
	path := db.segmentPath(a, a.segno)
	st, err := db.fs.Stat(path)
	size := int64(-1)
	if err == nil {
		size = st.Size()
	} else if !oserrorIsNotExist(err) {
		a.activeChecked = false
		return errs.Wrap(errs.CodeWriteFailed, err, "stat %s", path)
	}
	if size == a.segSize {
		return nil
	}
	e := errs.New(errs.CodeIndexMismatch, "segment %s is %d bytes; the index has records up to byte %d", path, size, a.segSize)
	e.File, e.Offset = path, max(size, 0)
	db.markDamaged(a, e)
	return a.damaged()
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
	w := p.newWrite(p.segno, 0, true)
	w.buf = segment.AppendHeader(w.buf, &h)
	p.segHeader = h.Checksum
	p.segSize = int64(len(w.buf))
}

// writeFor returns the write run that continues the active segment.
func (g *group) writeFor(p *pendingAnchor) *segWrite {
	if n := len(p.writes); n > 0 && p.writes[n-1].segno == p.segno && !p.writes[n-1].seal {
		return &p.writes[n-1]
	}
	return p.newWrite(p.segno, p.segSize, false)
}

// newWrite starts a write run, reusing a buffer from an earlier group.
func (p *pendingAnchor) newWrite(segno uint64, offset int64, create bool) *segWrite {
	if n := len(p.writes); n < cap(p.writes) {
		p.writes = p.writes[:n+1]
	} else {
		p.writes = append(p.writes, segWrite{})
	}
	w := &p.writes[len(p.writes)-1]
	w.segno, w.offset, w.create, w.seal, w.buf = segno, offset, create, false, w.buf[:0]
	return w
}

// emit writes a prepared record's journal record and index rows, and keeps
// its hash for the anchor's tree, which the applier extends (extendTrees).
func (g *group) emit(pr *preparedRecord) {
	db, rec, p := g.db, &pr.rec, pr.p
	frame := p.writes[pr.write].buf[pr.bufStart : pr.bufStart+pr.size]
	g.block = schema.AppendJournalRecord(g.block, rec.Anchor, pr.segno, pr.offset, frame)

	g.scratch = schema.RecordRows(g.batch, &g.versions, rec, pr.segno, pr.offset, pr.size, db.opts.InlineValueMax, g.scratch)

	p.leaves = append(p.leaves, rec.Hash)
	g.records++
}

func (db *DB) lookupIdem(anchor string, key []byte) (schema.Idem, bool, error) {
	v, closer, err := db.index.Get(schema.IdemKey(anchor, key))
	if errors.Is(err, pebble.ErrNotFound) {
		return schema.Idem{}, false, nil
	}
	if err != nil {
		return schema.Idem{}, false, errs.Wrap(errs.CodeWriteFailed, err, "read idempotency key")
	}
	defer closer.Close()
	e, err := schema.DecodeIdem(v)
	if err != nil {
		return e, false, errs.Wrap(errs.CodeIndexMismatch, err, "anchor %q idempotency key", anchor)
	}
	return e, true, nil
}

func newConflict(original Receipt, existing, requested segment.Hash, key []byte) *ConflictError {
	// The receipt the original append got (SPEC §7), not the one a retry
	// of it would: the callers pass the retry's, marked a duplicate.
	original.Duplicate = false
	ex, rq := segment.ShortHex(existing, 8), segment.ShortHex(requested, 8)
	e := errs.New(errs.CodeConflict, "idempotency key %q was used for another request (seq %d): fingerprint %s, this request %s",
		key, original.Seq, ex, rq)
	e.Anchor, e.Seq = original.Anchor, original.Seq
	return &ConflictError{Original: original, Existing: ex, Requested: rq, err: e}
}

// versionRows holds a group's 'k' rows until the group is built, so that
// they enter its batch in key order. Pebble inserts a batch into the
// memtable's skiplist in batch order, and its inserter starts each search
// from the previous insert's position: keys in order share most of their
// path, while user keys in record order (random, in the benchmarks) cost a
// full search through a large memtable each. The applier, not the leader,
// is what bounds large groups, and this moves the sort to the leader.
type versionRows struct {
	arena []byte
	rows  []versionRow
}

// versionRow is one row's key, arena[start:mid], and value, arena[mid:end].
type versionRow struct{ start, mid, end int }

// Set keeps a copy of the row.
func (v *versionRows) Set(key, value []byte, _ *pebble.WriteOptions) error {
	start := len(v.arena)
	v.arena = append(v.arena, key...)
	mid := len(v.arena)
	v.arena = append(v.arena, value...)
	v.rows = append(v.rows, versionRow{start, mid, len(v.arena)})
	return nil
}

// setSorted sets the rows into b in key order and empties v. Version keys
// are unique per record, so the order of the rows cannot change what the
// batch writes.
func (v *versionRows) setSorted(b *pebble.Batch) {
	if len(v.rows) > 1 {
		slices.SortFunc(v.rows, func(x, y versionRow) int {
			return bytes.Compare(v.arena[x.start:x.mid], v.arena[y.start:y.mid])
		})
	}
	for _, r := range v.rows {
		_ = b.Set(v.arena[r.start:r.mid], v.arena[r.mid:r.end], nil)
	}
	v.arena, v.rows = v.arena[:0], v.rows[:0]
}

// reset empties v, dropping a buffer only a very large group needed.
func (v *versionRows) reset() {
	v.arena, v.rows = v.arena[:0], v.rows[:0]
	if cap(v.arena) > 4<<20 {
		v.arena, v.rows = nil, nil
	}
}
