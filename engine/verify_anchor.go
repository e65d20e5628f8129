package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/engine/internal/treestore"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
	merkleproof "github.com/transparency-dev/merkle/proof"
)

// anchorCheck is the check of one anchor: one pass over its segment files,
// in step with its 's' rows in the snapshot.
type anchorCheck struct {
	v       *verifier
	id      string
	dir     string
	a       *anchor
	view    anchorView // the published state, captured before the snapshot
	hasView bool
	loadErr error // the anchor's state could not be loaded from the index

	meta    schema.AnchorMeta
	hasMeta bool
	last    uint64       // L: the highest seq with an 's' row in the snapshot
	from    *proof.Entry // trusted (size, root) from VerifyOptions.From
	wanted  []uint64     // tree sizes whose roots the checkpoints need

	// what the pass found
	roots      map[uint64]segment.Hash // the chain's root at each wanted size
	fromRoot   bool                    // the From entry's root was shown from the index tree
	start      uint64                  // first seq checked (1, or the From size + 1)
	tree       proof.Stack
	treeOK     bool // tree holds exactly the leaves 1..tree.size
	nodes      []storedNode
	kExpect    rowDigest
	iExpect    rowDigest
	exactRows  bool                   // 'k' and 'i' rows are checked one by one
	unreadable map[uint64]bool        // seqs whose frames could not be read
	truncs     []truncRange           // seqs only a stub holds (compaction removed them)
	stubIdem   map[string]expectedRow // 'i' rows the stubs imply, by key
	findings   int

	rows   seqCursor
	sc     *segment.Scanner
	seg    segState
	next   uint64       // the seq the next record must carry
	prev   segment.Hash // the hash it must link to
	lastCt uint64       // the counter of the record before
	tailAt *tailIssue   // the first problem past the snapshot's rows
	tailN  uint64       // whole records past the snapshot's rows
	newest segState     // the newest segment seen, for the 'a' row
	sealed bool         // the newest segment is sealed

	fromSeg   uint64 // incremental: the segment of the trusted record
	fromEnd   int64  // and the offset just past it
	resume    bool   // the next segment (or stub) holds the trusted record
	resumeOff int64  // and the offset just past it in a segment
	complete  bool   // the pass reached the end
	batch     *pebble.Batch
	hb        *pebble.Batch // into the history check's store (verify_histfrom.go)
	histSeen  uint64        // seqs inside the history frontier read (records and stub seqs)
	scratch   []byte
	dbuf      []byte // scratch of the row digests
}

// segState is the segment being read.
type segState struct {
	segno  uint64
	path   string
	size   int64
	header segment.Header
	hsize  int64
}

// tailIssue is a frame past the snapshot's rows that did not read, or the
// first whole one: unless an append is in flight, it is a finding.
type tailIssue struct {
	seq    uint64
	path   string
	offset int64
	err    *segment.FrameError // nil: a whole record the index lacks
}

// storedNode is a tree node the index must hold in an 'n' row.
type storedNode struct {
	level uint8
	index uint64
	hash  segment.Hash
}

// segInfo is one segment file of an anchor directory, or the stub compaction
// left of a segment it removed.
type segInfo struct {
	segno uint64
	path  string
	stub  bool
}

// report records a finding about the anchor's log or its index. Verify
// makes the anchor read-only for one about the log (noteDamage).
func (c *anchorCheck) report(code errs.Code, seq uint64, file string, offset int64, format string, args ...any) {
	f := c.reportClaim(code, seq, file, offset, format, args...)
	c.v.mu.Lock()
	c.v.logFindings = append(c.v.logFindings, f)
	c.v.mu.Unlock()
}

// reportClaim records a finding that a checkpoint's claim about the anchor
// (its size, a root) is not what its chain and index show. It says nothing
// of the log's bytes, which are checked on their own (in full when From's
// claim fails), so it makes nothing read-only: a checkpoint is input, and
// any one with this database's origin would otherwise stop the anchor's
// writers (TestVerifyFromAWrongCheckpointMarksNothing).
func (c *anchorCheck) reportClaim(code errs.Code, seq uint64, file string, offset int64, format string, args ...any) Finding {
	c.findings++
	f := Finding{Code: code, Anchor: c.id, Seq: seq, File: file, Offset: offset, Message: fmt.Sprintf(format, args...)}
	c.v.report(f)
	return f
}

func (c *anchorCheck) segPath(segno uint64) string {
	return c.v.db.fs.PathJoin(c.dir, segment.FileName(segno))
}

// diskBytes is the size of the anchor's segment files, for progress.
func (c *anchorCheck) diskBytes() int64 {
	db := c.v.db
	segs, err := listSegments(db, c.dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, s := range segs {
		if st, err := db.fs.Stat(s.path); err == nil {
			n += st.Size()
		}
	}
	return n
}

// run checks the anchor.
func (c *anchorCheck) run() {
	defer c.v.anchorsDone.Add(1)
	if err := c.check(); err != nil && !c.v.halted() {
		c.v.fail(err)
	}
}

func (c *anchorCheck) check() error {
	v, db := c.v, c.v.db
	c.unreadable = make(map[uint64]bool)
	c.roots = make(map[uint64]segment.Hash)
	if c.loadErr != nil {
		c.report(errs.CodeIndexMismatch, 0, "", 0, "the index's state of the anchor does not load: %s", errs.Message(c.loadErr))
	}
	if c.hasView && c.view.damage != nil {
		d := c.view.damage
		c.report(d.Code, d.Seq, d.File, d.Offset, "damage recorded earlier (the anchor is read-only until rebuild-index): %s", d.Message)
	}
	if err := c.readMeta(); err != nil {
		return err
	}
	defer func() {
		if c.batch != nil {
			_ = c.batch.Close()
		}
		if c.hb != nil {
			c.flushHist(true)
			_ = c.hb.Close()
		}
	}()
	if c.a != nil {
		// Frames the index names may still be in the anchor's buffer.
		if err := db.flushSegmentBytes(c.a); err != nil {
			return err
		}
	}
	prefix := schema.AnchorPrefix(schema.TagSeq, c.id)
	it, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: schema.PrefixEnd(prefix)})
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "index iterator")
	}
	defer it.Close()
	if it.Last() && len(it.Key()) == len(prefix)+8 {
		c.last = be.Uint64(it.Key()[len(prefix):])
	}
	c.rows = seqCursor{c: c, it: it, prefix: len(prefix)}

	segs, err := listSegments(db, c.dir)
	if e := foreignOf(err); e != nil {
		// The anchor's directory is a FIFO, a file, a dangling link: no
		// segment to read, which every row then says again.
		c.report(errs.CodeChainBroken, 0, e.File, 0, "the anchor's directory %s", e.Message)
		err = nil
	}
	if err != nil {
		return err
	}
	startSeg, err := c.begin(segs)
	if err != nil {
		return err
	}
	if startSeg >= 0 {
		if err := c.scan(segs[startSeg:]); err != nil {
			return err
		}
	}
	if v.halted() {
		return nil
	}
	c.missingRecords()
	c.checkTail()
	c.checkHead()
	if err := c.checkNodes(); err != nil {
		return err
	}
	if err := c.checkIdemRows(); err != nil {
		return err
	}
	c.checkMeta()
	c.complete = !v.halted()
	return nil
}

func (c *anchorCheck) readMeta() error {
	v, closer, err := c.v.snap.Get(schema.AnchorKey(c.id))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "read anchor %q", c.id)
	}
	defer closer.Close()
	m, err := schema.DecodeAnchorMeta(v)
	if err != nil {
		c.report(errs.CodeIndexMismatch, 0, "", 0, "the anchor's 'a' row is malformed: %s", errs.Message(err))
		return nil
	}
	c.meta, c.hasMeta = m, true
	return nil
}

// begin sets up the pass: from the genesis for a full check, or from the
// trusted checkpoint's size. It returns the index in segs of the first
// segment to read (-1: none).
func (c *anchorCheck) begin(segs []segInfo) (int, error) {
	c.start, c.next, c.prev = 1, 1, segment.GenesisHash(c.id)
	c.tree, c.treeOK = proof.Stack{}, true
	c.noteRoot()
	if c.from != nil && c.from.Size > 0 {
		ok, err := c.beginAfter(c.from.Size)
		if err != nil || ok {
			if err != nil {
				return -1, err
			}
			return c.resumeFrom(segs)
		}
		// The index cannot show the trusted tree: check everything.
		c.start, c.next, c.prev = 1, 1, segment.GenesisHash(c.id)
		c.tree, c.treeOK, c.exactRows = proof.Stack{}, true, false
		c.noteRoot()
	}
	if len(segs) == 0 {
		return -1, nil
	}
	return 0, nil
}

// beginAfter prepares an incremental check after size records: the index's
// tree at size must have the trusted root, and the record at size must be
// its last leaf and read whole. It reports whether the check can start
// there; if not, the reasons are findings and the anchor is checked in full.
func (c *anchorCheck) beginAfter(size uint64) (bool, error) {
	v := c.v
	c.exactRows = true
	if size > c.last {
		c.reportClaim(errs.CodeChainBroken, c.last+1, "", 0, "the trusted checkpoint has %d records of the anchor; the index has %d", size, c.last)
		return false, nil
	}
	st := treestore.Index{R: v.snap, Anchor: c.id}
	rng, err := proof.LoadRange(v.ctx, st, size)
	if err != nil {
		if errs.CodeOf(err) == errs.CodeWriteFailed {
			return false, err
		}
		c.report(errs.CodeIndexMismatch, size, "", 0, "the index's tree at size %d does not load: %s", size, errs.Message(err))
		return false, nil
	}
	root, err := rng.GetRootHash(nil)
	if err != nil || !bytes.Equal(root, c.from.Root[:]) {
		c.reportClaim(errs.CodeHashMismatch, size, "", 0, "the index's tree at size %d has root %x; the trusted checkpoint says %s", size, root, c.from.Root)
		return false, nil
	}
	row, ok, err := c.rowAt(size)
	if err != nil {
		return false, err
	}
	if !ok {
		c.report(errs.CodeIndexMismatch, size, "", 0, "no 's' row for seq %d", size)
		return false, nil
	}
	path := c.segPath(row.Segno)
	rec := &segment.Record{Seq: size, Hash: row.Hash, Counter: row.Counter}
	if row.Size > 0 {
		if rec, err = c.readOne(path, size, row); err != nil || rec == nil {
			return false, err
		}
	}
	// NB: compaction may have truncated the record (its row says size 0):
	// then the index's hash stands in for it, and the inclusion proof below
	// binds that hash to the trusted root all the same.
	leaf := segment.LeafHash(rec.Hash)
	path2, err := proof.Inclusion(v.ctx, st, size-1, size)
	if err == nil {
		err = proof.MerkleError(merkleproof.VerifyInclusion(segment.Blake3RFC6962, size-1, size, leaf[:], path2, c.from.Root[:]))
	}
	if err != nil {
		if errs.CodeOf(err) == errs.CodeWriteFailed {
			return false, err
		}
		c.reportClaim(errs.CodeHashMismatch, size, path, row.Offset, "record seq %d (%s) is not the last leaf of the trusted tree: %s", size, rec.Hash, errs.Message(err))
		return false, nil
	}
	c.tree = proof.StackFrom(rng.Hashes(), size)
	c.fromRoot = true
	c.start, c.next, c.prev, c.lastCt = size+1, size+1, rec.Hash, rec.Counter
	c.noteRoot()
	c.fromSeg, c.fromEnd = row.Segno, row.Offset+int64(row.Size)
	c.rows.seek(c.start)
	return true, nil
}

// readOne reads and checks the record seq at row; a problem is a finding
// and yields nil.
func (c *anchorCheck) readOne(path string, seq uint64, row schema.Location) (*segment.Record, error) {
	f, err := fsutil.Open(c.v.db.fs, path, false)
	if err != nil {
		if oserrorIsNotExist(err) {
			c.report(errs.CodeChainBroken, seq, path, 0, "segment %s is missing", path)
			return nil, nil
		}
		if e := foreignOf(err); e != nil {
			c.report(errs.CodeChainBroken, seq, path, 0, "segment %s", e.Message)
			return nil, nil
		}
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "open %s", path)
	}
	defer f.Close()
	rec, _, err := segment.ReadFrameAt(f, c.id, row.Offset, int(row.Size), seq, nil)
	if err != nil {
		var fe *segment.FrameError
		if !errors.As(err, &fe) {
			return nil, errs.Wrap(errs.CodeWriteFailed, err, "read %s", path)
		}
		code := fe.Code
		if code == "" {
			code = errs.CodeChainBroken
		}
		c.report(code, seq, path, row.Offset, "%s", fe.Msg)
		return nil, nil
	}
	if rec.Hash != row.Hash || rec.Counter != row.Counter {
		c.report(errs.CodeIndexMismatch, seq, path, row.Offset, "'s' row of seq %d says hash %s counter %d; the record has %s counter %d", seq, row.Hash, row.Counter, rec.Hash, rec.Counter)
		return nil, nil
	}
	return &rec, nil
}

// rowAt reads the 's' row of seq from the snapshot.
func (c *anchorCheck) rowAt(seq uint64) (schema.Location, bool, error) {
	v, closer, err := c.v.snap.Get(schema.SeqKey(c.id, seq))
	if errors.Is(err, pebble.ErrNotFound) {
		return schema.Location{}, false, nil
	}
	if err != nil {
		return schema.Location{}, false, errs.Wrap(errs.CodeWriteFailed, err, "read index")
	}
	defer closer.Close()
	e, err := schema.DecodeLocation(v)
	if err != nil {
		c.report(errs.CodeIndexMismatch, seq, "", 0, "'s' row of seq %d is malformed: %s", seq, errs.Message(err))
		return schema.Location{}, false, nil
	}
	return e, true, nil
}

// resumeFrom positions an incremental pass just after the trusted record:
// in its segment, past its frame.
func (c *anchorCheck) resumeFrom(segs []segInfo) (int, error) {
	i := slices.IndexFunc(segs, func(s segInfo) bool { return s.segno == c.fromSeg })
	if i < 0 {
		c.report(errs.CodeChainBroken, c.start-1, c.segPath(c.fromSeg), 0, "segment %d, which holds seq %d, is missing", c.fromSeg, c.start-1)
		return -1, nil
	}
	// Not the offset alone: a stub's rows rebuilt from the files say offset
	// 0 (the frames are gone), and the pass still starts inside it.
	c.resume, c.resumeOff = true, c.fromEnd
	return i, nil
}

// scan reads the segments in order.
func (c *anchorCheck) scan(segs []segInfo) error {
	want := segs[0].segno
	if c.start == 1 && want != 1 {
		want = 1
	}
	for i, s := range segs {
		if c.v.halted() {
			return nil
		}
		if s.segno != want {
			for m := want; m < s.segno; m++ {
				c.report(errs.CodeChainBroken, 0, c.segPath(m), 0, "segment %d is missing (the directory has %d next)", m, s.segno)
			}
			c.skipRows(func(e schema.Location) bool { return e.Segno < s.segno })
		}
		want = s.segno + 1
		newest := i == len(segs)-1
		scan := c.scanSegment
		if s.stub {
			scan = c.scanStub
		}
		if err := scan(s, newest); err != nil {
			return err
		}
	}
	return nil
}

// scanSegment reads one segment file.
func (c *anchorCheck) scanSegment(s segInfo, newest bool) error {
	db := c.v.db
	// NB: a segment that is not a regular file is never opened (the open
	// of a FIFO blocks): a finding, as a segment that disappeared is.
	f, err := fsutil.Open(db.fs, s.path, true)
	if err != nil {
		if oserrorIsNotExist(err) {
			c.report(errs.CodeChainBroken, 0, s.path, 0, "segment %s disappeared", s.path)
			return nil
		}
		if e := foreignOf(err); e != nil {
			c.report(errs.CodeChainBroken, 0, s.path, 0, "segment %s", e.Message)
			return nil
		}
		return errs.Wrap(errs.CodeWriteFailed, err, "open %s", s.path)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "stat %s", s.path)
	}
	c.seg = segState{segno: s.segno, path: s.path, size: st.Size()}
	c.newest, c.sealed = c.seg, false
	sc, err := segment.NewScanner(f, st.Size())
	if err != nil {
		var fe *segment.FrameError
		if !errors.As(err, &fe) {
			return errs.Wrap(errs.CodeWriteFailed, err, "read %s", s.path)
		}
		code := fe.Code
		if fe.Kind == segment.Torn || code == "" {
			code = errs.CodeChainBroken
		}
		c.report(code, c.next, s.path, 0, "segment header: %s", fe.Msg)
		c.skipRows(func(e schema.Location) bool { return e.Segno == s.segno })
		return nil
	}
	c.sc = sc
	h := sc.Header
	c.seg.header, c.seg.hsize = h, int64(sc.HeaderSize)
	c.newest = c.seg
	headerOK := true
	switch {
	case h.Anchor != c.id:
		c.report(errs.CodeChainBroken, c.next, s.path, 0, "segment header names anchor %q", h.Anchor)
		headerOK = false
	case h.Segno != s.segno:
		c.report(errs.CodeChainBroken, c.next, s.path, 0, "segment file %d has the header of segment %d", s.segno, h.Segno)
		headerOK = false
	}
	if !headerOK {
		c.skipRows(func(e schema.Location) bool { return e.Segno == s.segno })
		return nil
	}
	if c.resume {
		// An incremental pass starts inside this segment, after the
		// trusted record.
		off := c.resumeOff
		c.resume, c.resumeOff = false, 0
		if c.next < h.FirstSeq || off > st.Size() {
			c.report(errs.CodeChainBroken, c.next, s.path, off, "segment %d cannot hold seq %d at offset %d", s.segno, c.next, off)
			return nil
		}
		sc.Resume(off, c.next, c.prev, c.next-h.FirstSeq)
	} else if h.FirstSeq != c.next || h.PrevHash != c.prev {
		c.report(errs.CodeChainBroken, c.next, s.path, 0, "segment header (first seq %d, prev hash %s) does not continue the chain at seq %d (%s)",
			h.FirstSeq, h.PrevHash, c.next, c.prev)
		if h.FirstSeq != c.next {
			c.treeOK = c.treeOK && h.FirstSeq == c.next
			c.skipRows(func(e schema.Location) bool { return e.Segno < s.segno })
		}
		c.next, c.prev = h.FirstSeq, h.PrevHash
	}
	for {
		if c.v.halted() {
			return nil
		}
		fr, err := sc.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var fe *segment.FrameError
			if !errors.As(err, &fe) {
				return errs.Wrap(errs.CodeWriteFailed, err, "read %s", s.path)
			}
			if !c.frameError(fe, newest) {
				c.v.bytes.Add(sc.Offset() - c.seg.hsize)
				return nil
			}
			continue
		}
		if err := c.record(&fr); err != nil {
			return err
		}
	}
	c.v.bytes.Add(sc.Offset() - c.seg.hsize)
	switch {
	case sc.Footer() != nil:
		c.sealed = true
	case !newest:
		c.report(errs.CodeChainBroken, c.next, s.path, sc.Offset(), "segment %d is not sealed, yet segment %d follows", s.segno, s.segno+1)
	}
	return nil
}

// record handles one whole, linked record from the scanner.
func (c *anchorCheck) record(fr *segment.Frame) error {
	rec := &fr.Record
	c.v.records.Add(1)
	if rec.Seq > c.last {
		// Past the snapshot's rows: an append in flight, or a record the
		// index lacks (decided in checkTail).
		if c.tailN == 0 && c.tailAt == nil {
			c.tailAt = &tailIssue{seq: rec.Seq, path: c.seg.path, offset: fr.Offset}
		}
		c.tailN++
		c.next, c.prev = rec.Seq+1, rec.Hash
		return nil
	}
	if rec.Counter <= c.lastCt && rec.Seq > 1 {
		c.report(errs.CodeChainBroken, rec.Seq, c.seg.path, fr.Offset, "counter %d is not above the previous record's %d", rec.Counter, c.lastCt)
	}
	c.lastCt = rec.Counter
	c.noteHistRecord(rec, false)
	if err := c.expectRows(rec, fr.Offset, fr.Size); err != nil {
		return err
	}
	c.leaf(rec.Seq, rec.Hash, rec.Counter, fr.Offset)
	c.next, c.prev = rec.Seq+1, rec.Hash
	return nil
}

// leaf extends the recomputed tree with record seq and checks the head.
func (c *anchorCheck) leaf(seq uint64, hash segment.Hash, counter uint64, offset int64) {
	if c.treeOK && c.tree.Size()+1 == seq {
		c.tree.Append(segment.LeafHash(hash), c.visitNode)
		c.noteRoot()
	} else {
		c.treeOK = false
	}
	if c.hasView && seq == c.view.head.head {
		if hash != c.view.head.headHash || counter != c.view.head.lastCounter {
			c.report(errs.CodeIndexMismatch, seq, c.seg.path, offset, "the anchor's head is seq %d hash %s counter %d; the record is %s counter %d",
				seq, c.view.head.headHash, c.view.head.lastCounter, hash, counter)
		}
	}
}

func (c *anchorCheck) visitNode(level uint, index uint64, h *segment.Hash) {
	if treestore.Stored(level) && (c.start == 1 || (index+1)<<level >= c.start) {
		c.nodes = append(c.nodes, storedNode{level: uint8(level), index: index, hash: *h})
	}
}

// noteRoot keeps the root at the current size when a checkpoint needs it.
func (c *anchorCheck) noteRoot() {
	if !c.treeOK {
		return
	}
	if _, ok := slices.BinarySearch(c.wanted, c.tree.Size()); ok {
		c.roots[c.tree.Size()] = c.tree.Root()
	}
	if c.hasView && c.tree.Size() == c.view.head.head {
		c.roots[c.tree.Size()] = c.tree.Root()
	}
}

// frameError handles a frame the scanner could not read. It reports whether
// the scan goes on in this segment (after the damaged frame, where the index
// says the next one starts).
func (c *anchorCheck) frameError(fe *segment.FrameError, newest bool) bool {
	sc, seg := c.sc, &c.seg
	seq := sc.NextSeq()
	if seq > c.last {
		// Nothing in the snapshot vouches for bytes here: a write in
		// flight, or damage past the last record (decided in checkTail).
		switch {
		case !newest:
			// A segment with a successor is never written again: its
			// tail is not in flight.
			c.report(errs.CodeChainBroken, seq, seg.path, fe.Offset, "%s", fe.Msg)
		case c.tailAt == nil:
			c.tailAt = &tailIssue{seq: seq, path: seg.path, offset: fe.Offset, err: fe}
		}
		return false
	}
	row, ok := c.rows.peek(seq)
	switch {
	case !ok:
		code := fe.Code
		if fe.Kind == segment.Torn || code == "" {
			code = errs.CodeChainBroken
		}
		c.report(code, seq, seg.path, fe.Offset, "%s (and the index has no row for seq %d)", fe.Msg, seq)
		c.treeOK = false
		return false
	case row.Segno != seg.segno:
		// The index puts seq in a later segment: the seal belongs here.
		c.report(errs.CodeChainBroken, seq, seg.path, fe.Offset, "segment %d must end with its seal at offset %d: %s", seg.segno, fe.Offset, fe.Msg)
		return false
	}
	c.rows.take(seq)
	end := row.Offset + int64(row.Size)
	if fe.Kind == segment.Torn && (row.Offset != fe.Offset || end > seg.size) {
		last := c.lastRowIn(seg.segno, seq)
		c.report(errs.CodeChainBroken, seq, seg.path, fe.Offset, "segment %d ends at byte %d inside record seq %d; records %d..%d of the index are missing (%s)",
			seg.segno, seg.size, seq, seq, last, fe.Msg)
		c.useRow(seq, row)
		c.skipRows(func(e schema.Location) bool { return e.Segno == seg.segno })
		return false
	}
	code := fe.Code
	if code == "" {
		// A length that runs past the end where the index says the whole
		// frame is: the length field is damaged.
		code = errs.CodeHashMismatch
	}
	c.report(code, seq, seg.path, fe.Offset, "%s", fe.Msg)
	c.useRow(seq, row)
	if row.Offset != fe.Offset || end > seg.size {
		c.skipRows(func(e schema.Location) bool { return e.Segno == seg.segno })
		return false
	}
	// Go on after the damaged frame, where the index says it ends, linking
	// to the hash the index holds for it.
	sc.Resume(end, seq+1, row.Hash, seq+1-seg.header.FirstSeq)
	return true
}

// useRow stands the index's row in for a record whose frame cannot be read,
// so the chain and the tree can go on past it.
func (c *anchorCheck) useRow(seq uint64, row schema.Location) {
	c.unreadable[seq] = true
	c.leaf(seq, row.Hash, row.Counter, row.Offset)
	c.lastCt = row.Counter
	c.next, c.prev = seq+1, row.Hash
}

// skipRows consumes the rows for which in is true (at the cursor, in
// order), standing them in for records that cannot be read.
func (c *anchorCheck) skipRows(in func(schema.Location) bool) {
	for {
		seq, row, ok := c.rows.current()
		if !ok || seq > c.last {
			return
		}
		e, err := schema.DecodeLocation(row)
		if err != nil || !in(e) {
			return
		}
		c.rows.take(seq)
		c.useRow(seq, e)
	}
}

// lastRowIn returns the highest seq from seq on whose row is in segno (seq
// if none is).
func (c *anchorCheck) lastRowIn(segno, seq uint64) uint64 {
	last := seq
	for s := seq + 1; s <= c.last; s++ {
		e, ok, err := c.rowAt(s)
		if err != nil || !ok || e.Segno != segno {
			break
		}
		last = s
	}
	return last
}
