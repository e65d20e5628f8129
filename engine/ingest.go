package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/anchordb/anchordb/engine/internal/admission"
	"github.com/anchordb/anchordb/engine/internal/scratch"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/zeebo/blake3"
)

// Ingest: the partition case. Anchors written in another anchordb directory
// are verified record by record and joined to this database. An anchor we
// do not hold is copied whole; one we hold must either be behind the arriving
// log (its records are a prefix of it: the rest is appended) or ahead of it
// (nothing to do). Anything else is a fork: the two logs disagree at some
// seq, and the whole ingest is refused with STATE_002 naming both heads.
// Records are appended exactly as they were written — seq, counter, time,
// prev_hash, hash — so every receipt and proof from the other side stays
// valid here, and the Lamport clock moves past the arriving counters.

// IngestOptions select what to ingest.
type IngestOptions struct {
	// Anchors limits the ingest to these anchors; nil means every anchor of
	// the source.
	Anchors []string
	// Progress, if set, is called after each batch of appended records.
	Progress func(done, total uint64)
}

// IngestedAnchor is what happened to one anchor.
type IngestedAnchor struct {
	Anchor   string       `json:"anchor"`
	Status   string       `json:"status"` // "new", "extended", "up_to_date"
	Had      uint64       `json:"had"`    // our head before
	Arrived  uint64       `json:"arrived"`
	Appended uint64       `json:"appended"`
	Head     segment.Hash `json:"head"`
}

// IngestReport sums up an ingest.
type IngestReport struct {
	From     string           `json:"from"`
	Anchors  []IngestedAnchor `json:"anchors"`
	Appended uint64           `json:"appended"`
}

// ForkError is the STATE_002 refusal of an ingest whose logs disagree.
type ForkError struct {
	Anchor   string
	Seq      uint64       // the first seq where the logs differ (or are checked)
	Ours     segment.Hash // our hash at Seq
	Theirs   segment.Hash // the arriving hash at Seq
	OurHead  Receipt
	TheirSeq uint64 // the arriving log's head seq
	TheirHd  segment.Hash
	err      *errs.Error
}

// Error is the coded message: STATE_002, the anchor and both heads.
func (e *ForkError) Error() string { return e.err.Error() }

// Unwrap exposes the coded *Error.
func (e *ForkError) Unwrap() error { return e.err }

// sourceAnchor is one anchor's log found in the source directory.
type sourceAnchor struct {
	id    string
	dir   string
	segs  []segFile
	first uint64 // seq of its first record
	had   uint64 // the records of it we hold (set by checkArrival)
	head  uint64
	hash  segment.Hash
}

// Ingest verifies and joins anchors from the anchordb directory from. The
// source must not be open for writing (its lock is taken for the duration);
// a source that was not closed cleanly must be opened and closed once first,
// so that its segments hold everything it acknowledged.
//
// Every arriving log is verified, and checked against ours, before anything
// is joined; a log that is refused (a fork, a forgery) joins nothing. While
// an ingest runs, local appends to the anchors it joins are refused with
// STATE_001 (ErrScopeLocked), so the heads it checked are the heads it
// extends; other anchors take appends as usual, and ingests run one at a
// time. Anchors are then joined one after another, in batches. When an I/O
// error (or the end of ctx) stops the joining, the records appended stay,
// and the returned report counts them, the stopped anchor included.
func (db *DB) Ingest(ctx context.Context, from string, opts IngestOptions) (IngestReport, error) {
	rep := IngestReport{From: from}
	if err := db.writable(); err != nil {
		return rep, err
	}
	// Close closes the index once admission is drained, and pass 1 reads
	// it (our heads, rows, idempotency keys) before anything is admitted:
	// the ingest holds the gate Close drains, and stops between anchors
	// once Close has begun. It holds the read gate too, as every read does.
	if err := db.adm.Enter(); err != nil {
		return rep, err
	}
	defer db.adm.LeaveGate()
	if !db.reads.Enter() {
		return rep, errClosed
	}
	defer db.reads.Leave()
	db.ingestMu.Lock()
	defer db.ingestMu.Unlock()
	// Only another database is a source: checked before its lock, so a
	// mistyped path gets no LOCK file of ours.
	if _, err := db.fs.Stat(db.fs.PathJoin(from, IDFile)); err != nil {
		if oserrorIsNotExist(err) {
			return rep, errs.New(errs.CodeInvalidInput, "%s is not an anchordb database (it has no %s file)", from, IDFile)
		}
		return rep, errs.Wrap(errs.CodeWriteFailed, err, "read %s", from)
	}
	lock, err := lockDir(db.fs, from)
	if err != nil {
		return rep, err
	}
	defer lock.Close()
	srcs, err := db.findSourceAnchors(from, opts.Anchors)
	if err != nil {
		return rep, err
	}
	// Pass 1 checks each arriving log against our head, and pass 2 joins
	// it: a local append in between would move the head, and pass 2 would
	// refuse the anchor as a fork after others were joined. Local appends
	// to these anchors are refused (STATE_001) until the ingest ends, and
	// the barrier lets every group built before that rule applied be
	// applied first, so our heads, read next, hold every one of them.
	held := make(map[string]bool, len(srcs))
	for _, s := range srcs {
		held[s.id] = true
	}
	db.ingesting.Store(&held)
	defer db.ingesting.Store(nil)
	if err := db.refuseReserved(held); err != nil {
		return rep, err
	}
	if err := db.commitBarrier(ctx); err != nil {
		return rep, err
	}
	// Pass 1: verify every arriving log completely, and decide, before
	// anything is joined.
	type plan struct {
		src *sourceAnchor
		had uint64
	}
	var plans []plan
	var total uint64
	for _, s := range srcs {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		if db.adm.Closing() {
			return rep, errClosed
		}
		info, _, err := db.anchorInfo(s.id)
		if err != nil {
			return rep, err
		}
		if info.Damage != "" {
			return rep, errs.New(errs.CodeChainBroken, "anchor %q is damaged here; it cannot be extended: %s", s.id, info.Damage)
		}
		had := info.Records
		if err := db.checkArrival(ctx, s, info); err != nil {
			return rep, err
		}
		plans = append(plans, plan{s, had})
		if s.head > had {
			total += s.head - had
		}
	}
	// Pass 2: append what is new, in batches, verbatim.
	var done uint64
	for _, p := range plans {
		s := p.src
		ia := IngestedAnchor{Anchor: s.id, Had: p.had, Arrived: s.head, Head: s.hash}
		switch {
		case s.head <= p.had:
			ia.Status = "up_to_date"
		case p.had == 0:
			ia.Status = "new"
		default:
			ia.Status = "extended"
		}
		if s.head > p.had {
			var batch []segment.Record
			var bytes int
			flush := func() error {
				if len(batch) == 0 {
					return nil
				}
				if err := db.appendVerbatim(ctx, batch); err != nil {
					return err
				}
				ia.Appended += uint64(len(batch))
				done += uint64(len(batch))
				if opts.Progress != nil {
					opts.Progress(done, total)
				}
				batch, bytes = batch[:0], 0
				return nil
			}
			err := db.scanSource(ctx, s, p.had+1, func(rec segment.Record) error {
				batch = append(batch, rec.Clone())
				bytes += rec.FrameSize()
				if len(batch) >= 1024 || bytes >= 4<<20 {
					return flush()
				}
				return nil
			})
			if err == nil {
				err = flush()
			}
			if err != nil {
				// What was appended stays: the report says how much.
				rep.Anchors = append(rep.Anchors, ia)
				rep.Appended += ia.Appended
				return rep, fmt.Errorf("ingest anchor %q after %d of its records (%d appended in all, on %s): %w",
					s.id, ia.Appended, rep.Appended, plural(len(rep.Anchors), "anchor"), err)
			}
		}
		rep.Appended += ia.Appended
		rep.Anchors = append(rep.Anchors, ia)
	}
	return rep, nil
}

// ingestIdemInMemory is how many idempotency keys of one arriving log an
// ingest's first pass holds in memory before it moves the rest to a
// scratch store (scratch.HashSet). A variable so tests can spill.
var ingestIdemInMemory = scratch.DefaultInMemory

// checkArrival verifies the arriving log s whole and checks it against
// ours (info): pass 1 of an ingest, for one anchor.
func (db *DB) checkArrival(ctx context.Context, s *sourceAnchor, info AnchorInfo) error {
	s.had = info.Records
	arrivals := &arrivalCheck{db: db, s: s, had: info.Records, last: info.LastCounter, idem: scratch.NewHashSet(db.openScratch, "ingest-idem", "ingest's idempotency key store", ingestIdemInMemory)}
	defer arrivals.idem.Close()
	if err := db.scanSource(ctx, s, 0, arrivals.record); err != nil {
		return err
	}
	if err := db.checkJoin(ctx, s, info.Records, info); err != nil {
		return err
	}
	// Only once the logs agree up to had: the records after it then
	// continue ours, and what is wrong with them is theirs.
	return arrivals.err
}

// checkJoin decides whether the arriving log s can join ours (had records,
// head info): it must agree with ours at the last seq both hold.
func (db *DB) checkJoin(ctx context.Context, s *sourceAnchor, had uint64, info AnchorInfo) error {
	if had == 0 {
		if s.first != 1 {
			e := errs.New(errs.CodeDependencyMissing, "anchor %q arrives truncated below seq %d and we hold none of it", s.id, s.first)
			e.Anchor = s.id
			return e
		}
		return nil
	}
	at := min(had, s.head)
	if at < s.first-1 {
		e := errs.New(errs.CodeDependencyMissing, "anchor %q arrives truncated below seq %d; we hold only %s", s.id, s.first, plural(had, "record"))
		e.Anchor = s.id
		return e
	}
	if at == 0 {
		// The arriving log holds no record (a segment with only its
		// header, which starts at genesis): a prefix of ours.
		return nil
	}
	var theirs segment.Hash
	if at == s.first-1 {
		theirs = s.firstPrev(db)
	} else if err := db.scanSource(ctx, s, at, func(rec segment.Record) error {
		theirs = rec.Hash
		return errStopScan
	}); err != nil && !errors.Is(err, errStopScan) {
		return err
	}
	ours, ok, err := db.location(s.id, at)
	if err != nil {
		return err
	}
	if !ok {
		return errs.New(errs.CodeIndexMismatch, "anchor %q: no index row for seq %d", s.id, at)
	}
	if ours.Hash == theirs {
		return nil
	}
	e := errs.New(errs.CodeConflict, "anchor %q has forked: at seq %d we hold %s, the arriving log %s (our head seq %d %s, theirs seq %d %s)",
		s.id, at, ours.Hash, theirs, info.Records, info.HeadHash, s.head, s.hash)
	e.Anchor, e.Seq = s.id, at
	return &ForkError{Anchor: s.id, Seq: at, Ours: ours.Hash, Theirs: theirs,
		OurHead:  Receipt{Anchor: s.id, Seq: info.Records, Counter: info.LastCounter, Hash: info.HeadHash},
		TheirSeq: s.head, TheirHd: s.hash, err: e}
}

var errStopScan = errors.New("stop scan")

// arrivalCheck checks, during the full scan of pass 1, what pass 2 would
// append of s — its records after seq had, whose hashes and links the scan
// checks — against the rules an append keeps and a hash does not: counters
// strictly increasing from ours (last, the counter of our seq had) and at
// most MaxCounter (INT_002, as verify reports it), at most MaxIngestCounter
// (INPUT_001: a log may hold it, we do not take it), each idempotency key
// used once in the anchor (STATE_002), and keys, values and idempotency keys
// within this database's limits (INPUT_001). A log that breaks one is refused in
// pass 1, before anything of any anchor is joined; pass 2 would refuse it
// only after joining what came before it. The first finding is kept in err
// and the scan goes on, so that a fork is reported as one.
type arrivalCheck struct {
	db   *DB
	s    *sourceAnchor
	had  uint64
	last uint64
	idem *scratch.HashSet // the idempotency keys arriving
	err  error
}

func (c *arrivalCheck) record(rec segment.Record) error {
	if rec.Seq <= c.had || c.err != nil {
		return nil
	}
	refuse := func(code errs.Code, format string, args ...any) error {
		e := errs.New(code, format, args...)
		e.Anchor, e.Seq = c.s.id, rec.Seq
		c.err = e
		return nil
	}
	// The source may have run with larger limits than ours: a record we
	// would refuse from a caller is refused from a log too (SPEC §9), or
	// our own reads, exports and imports would meet what they never accept.
	if err := segment.ValidateContent(rec.Anchor, rec.Type, rec.Key, rec.Value, rec.IdempotencyKey, c.db.opts.Limits); err != nil {
		why := err.Error()
		if e, ok := err.(*errs.Error); ok {
			why = e.Message
		}
		return refuse(errs.CodeInvalidInput, "anchor %q arrives at seq %d with a record over this database's limits: %s", c.s.id, rec.Seq, why)
	}
	if rec.Counter <= c.last || rec.Counter > MaxCounter {
		return refuse(errs.CodeChainBroken, "anchor %q arrives with counter %d at seq %d, not above %d of the record before it (or above the format's %d)",
			c.s.id, rec.Counter, rec.Seq, c.last, uint64(MaxCounter))
	}
	if rec.Counter > MaxIngestCounter {
		return refuse(errs.CodeInvalidInput, "anchor %q arrives with counter %d at seq %d, above the %d an ingest accepts (an honest log stays far below it; accepting it would exhaust the Lamport clock)",
			c.s.id, rec.Counter, rec.Seq, uint64(MaxIngestCounter))
	}
	c.last = rec.Counter
	if len(rec.IdempotencyKey) == 0 {
		return nil
	}
	h := blake3.Sum256(rec.IdempotencyKey)
	found, err := c.idem.Has(h)
	if err != nil {
		return err
	}
	if !found {
		if _, found, _, err = c.db.knownIdem(c.s.id, rec.IdempotencyKey); err != nil {
			return err
		}
	}
	if found {
		return refuse(errs.CodeConflict, "anchor %q arrives with idempotency key %q at seq %d, which the anchor already used", c.s.id, rec.IdempotencyKey, rec.Seq)
	}
	return c.idem.Add(h)
}

// firstPrev returns the hash the arriving log's first record links to.
func (s *sourceAnchor) firstPrev(db *DB) segment.Hash {
	_, h, err := (&reconciler{db: db}).readHeader(s.segs[0].path)
	if err != nil {
		return segment.Hash{}
	}
	return h.PrevHash
}

// findSourceAnchors lists the anchors of the source directory.
func (db *DB) findSourceAnchors(from string, only []string) ([]*sourceAnchor, error) {
	fs := db.fs
	root := fs.PathJoin(from, segment.AnchorsDir)
	var dirs []string
	idOf := map[string]string{} // the named anchors' directories
	if only != nil {
		named := make(map[string]bool, len(only))
		for _, id := range only {
			if err := segment.ValidateAnchorID(id); err != nil {
				return nil, err
			}
			if named[id] {
				continue // named twice: ingested once
			}
			named[id] = true
			d := segment.AnchorDir(fs, from, id)
			if _, err := fs.Stat(d); err != nil {
				e := errs.New(errs.CodeDependencyMissing, "anchor %q is not in %s", id, from)
				e.Anchor = id
				return nil, e
			}
			dirs = append(dirs, d)
			idOf[d] = id
		}
	} else {
		fans, err := fsutil.List(fs, root)
		if fsutil.IsEntryError(err) {
			_, err := listSourceDir(fs, root) // the INPUT_001 that says what it is
			return nil, err
		}
		if err != nil {
			if oserrorIsNotExist(err) {
				if _, serr := fs.Stat(from); serr != nil {
					return nil, errs.Wrap(errs.CodeInvalidInput, serr, "source %s", from)
				}
				return nil, nil
			}
			return nil, errs.Wrap(errs.CodeWriteFailed, err, "list %s", root)
		}
		slices.Sort(fans)
		for _, fan := range fans {
			if len(fan) != 2 || !isHex(fan) {
				continue
			}
			subs, err := listSourceDir(fs, fs.PathJoin(root, fan))
			if err != nil {
				return nil, err
			}
			slices.Sort(subs)
			for _, sub := range subs {
				if len(sub) == 30 && isHex(sub) {
					dirs = append(dirs, fs.PathJoin(root, fan, sub))
				}
			}
		}
	}
	var out []*sourceAnchor
	for _, d := range dirs {
		names, err := listSourceDir(fs, d)
		if err != nil {
			return nil, err
		}
		s := &sourceAnchor{dir: d}
		for _, n := range names {
			if segno, ok := segment.ParseFileName(n); ok {
				path := fs.PathJoin(d, n)
				// NB: before any is opened: the open of a FIFO blocks
				// with no context, and a device reads forever.
				if _, err := fsutil.Regular(fs, path, true); err != nil {
					var ee *fsutil.EntryError
					if !errors.As(err, &ee) {
						return nil, errs.Wrap(errs.CodeWriteFailed, err, "stat source segment %s", path)
					}
					e := errs.New(errs.CodeInvalidInput, "source segment %s is %s", path, ee.What)
					e.File = path
					return nil, e
				}
				s.segs = append(s.segs, segFile{segno, path})
			}
		}
		if len(s.segs) == 0 {
			if only != nil {
				// Named, and holding no log: as absent as no directory.
				e := errs.New(errs.CodeDependencyMissing, "anchor %q has no log in %s: its directory %s holds no segment", idOf[d], from, d)
				e.Anchor, e.File = idOf[d], d
				return nil, e
			}
			continue
		}
		slices.SortFunc(s.segs, func(a, b segFile) int { return cmp.Compare(a.segno, b.segno) })
		_, h, err := (&reconciler{db: db}).readHeader(s.segs[0].path)
		if err != nil {
			return nil, errs.Wrap(errs.CodeChainBroken, err, "source segment %s", s.segs[0].path)
		}
		if segment.AnchorDir(fs, from, h.Anchor) != d {
			return nil, errs.New(errs.CodeChainBroken, "source segment %s names anchor %q, which belongs elsewhere", s.segs[0].path, h.Anchor)
		}
		s.id, s.first = h.Anchor, h.FirstSeq
		out = append(out, s)
	}
	return out, nil
}

// listSourceDir lists a directory of the source's anchors tree. Where the
// tree has a file instead, the source is malformed (INPUT_001).
func listSourceDir(fs vfs.FS, dir string) ([]string, error) {
	names, err := fsutil.List(fs, dir)
	var ee *fsutil.EntryError
	if errors.As(err, &ee) {
		e := errs.New(errs.CodeInvalidInput, "source %s is %s, where the anchors tree has a directory", dir, ee.What)
		e.File = dir
		return nil, e
	}
	if err != nil {
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "list %s", dir)
	}
	return names, nil
}

// scanSource reads the arriving log front to back, checking everything the
// segment scanner checks plus the links between segments, and calls fn for
// each record with seq >= from (fn may be nil). A full scan (from 0) also
// records the log's head. Any damage refuses the ingest.
func (db *DB) scanSource(ctx context.Context, s *sourceAnchor, from uint64, fn func(segment.Record) error) error {
	var prev segment.Hash
	next := s.first
	for i, sf := range s.segs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if db.adm.Closing() {
			return errClosed
		}
		f, err := db.fs.Open(sf.path)
		if err != nil {
			return errs.Wrap(errs.CodeWriteFailed, err, "open %s", sf.path)
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return errs.Wrap(errs.CodeWriteFailed, err, "stat %s", sf.path)
		}
		sc, err := segment.NewScanner(f, st.Size())
		if err != nil {
			f.Close()
			return db.sourceDamage(s, sf.path, err)
		}
		// NB: the source's frame lengths size our reads. A frame longer
		// than any record our limits allow is refused from its length,
		// before it is read: arrivalCheck would refuse the record anyway,
		// after the scan had read and buffered up to the format's 528 MiB
		// of it (a sparse file costs the source nothing).
		sc.MaxBody = db.opts.Limits.MaxBody()
		h := sc.Header
		if h.Anchor != s.id || h.Segno != sf.segno || h.FirstSeq != next || (i > 0 && h.PrevHash != prev) || (i > 0 && sf.segno != s.segs[i-1].segno+1) {
			f.Close()
			e := errs.New(errs.CodeChainBroken, "source segment %s does not continue anchor %q at seq %d", sf.path, s.id, next)
			e.Anchor, e.File = s.id, sf.path
			return e
		}
		for n := 1; ; n++ {
			// A segment may be up to 1 TiB: neither the end of ctx (an
			// interrupt) nor Close, which waits for the ingest, is left
			// waiting for the end of one.
			if n%scanCtxEvery == 0 {
				err := ctx.Err()
				if err == nil && db.adm.Closing() {
					err = errClosed
				}
				if err != nil {
					f.Close()
					return err
				}
			}
			fr, err := sc.Next()
			if err != nil && !errors.Is(err, io.EOF) {
				fr, err = db.nextHeld(s, sc, err)
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				f.Close()
				return db.sourceDamage(s, sf.path, err)
			}
			if fn != nil && fr.Record.Seq >= from {
				if err := fn(fr.Record); err != nil {
					f.Close()
					return err
				}
			}
		}
		if sc.Footer() == nil && i < len(s.segs)-1 {
			f.Close()
			e := errs.New(errs.CodeChainBroken, "source segment %s is not sealed but a newer one follows", sf.path)
			e.Anchor, e.File = s.id, sf.path
			return e
		}
		next, prev = sc.NextSeq(), sc.HeadHash()
		f.Close()
	}
	if from == 0 {
		s.head, s.hash = next-1, prev
	}
	return nil
}

// nextHeld handles err, the scan of s failing at a frame: when it is a frame
// over our limits at a seq we hold, it may be the very record we hold,
// taken under limits since lowered, and it is read if it is no longer than
// our frame there (a frame with our hash has our length). The source's
// lengths still size no read beyond what our own log holds.
func (db *DB) nextHeld(s *sourceAnchor, sc *segment.Scanner, err error) (segment.Frame, error) {
	var fe *segment.FrameError
	if !errors.As(err, &fe) || fe.Kind != segment.OverLimit || fe.Seq > s.had {
		return segment.Frame{}, err
	}
	ours, ok, lerr := db.location(s.id, fe.Seq)
	if lerr != nil {
		return segment.Frame{}, lerr
	}
	body := int(ours.Size) - 4 - segment.HashSize
	if !ok || ours.Size == 0 || body <= sc.MaxBody {
		return segment.Frame{}, err
	}
	limit := sc.MaxBody
	sc.MaxBody = body
	fr, err := sc.Next()
	sc.MaxBody = limit
	return fr, err
}

// scanCtxEvery is how many records scanSource reads between looks at its
// context and at Close.
const scanCtxEvery = 1024

// sourceDamage is the coded refusal of a source segment the scanner could
// not read to its end: a torn or corrupt frame (INT_*), or one over our
// limits (INPUT_001, as a whole record over them is: SPEC §9).
func (db *DB) sourceDamage(s *sourceAnchor, path string, err error) error {
	var fe *segment.FrameError
	if errors.As(err, &fe) {
		e := fe.AsError(s.id, path)
		if fe.Kind == segment.OverLimit {
			l := db.opts.Limits
			e.Message = fmt.Sprintf("anchor %q arrives at seq %d with a frame over this database's limits (key %d, value %d, idempotency key %d bytes), refused unread: %s",
				s.id, fe.Seq, l.MaxKey, l.MaxValue, l.MaxIdempotencyKey, e.Message)
		}
		if fe.Kind == segment.Torn {
			e.Message += " (a torn tail: open and close the source database once so its recovery completes, then ingest)"
		}
		return e
	}
	return errs.Wrap(errs.CodeWriteFailed, err, "read %s", path)
}

// commitBarrier returns once every commit group built before it is applied
// and visible: it sends an empty request through group commit, which the
// leader builds after every request queued ahead of it, and waits for it to
// be visible. What the caller stored before calling it is seen by every
// group built after.
func (db *DB) commitBarrier(ctx context.Context) error {
	var c admission.Cost // nothing to append: it only holds Close off, as duplicates do
	if err := db.adm.Acquire(ctx, &c, false); err != nil {
		return err
	}
	defer db.adm.Release(&c)
	req := newRequest()
	db.commit.commit(req)
	err := req.err
	freeRequest(req)
	if err != nil {
		return err
	}
	return db.commit.awaitVisible(ctx)
}

// appendVerbatim appends records written elsewhere, as they are, atomically.
func (db *DB) appendVerbatim(ctx context.Context, recs []segment.Record) error {
	if err := db.writable(); err != nil {
		return err
	}
	var bytes int64
	for i := range recs {
		bytes += int64(recs[i].FrameSize())
	}
	// Bounded like any append, but not rate-limited per anchor: these
	// records were written (and limited) elsewhere.
	c := admission.Cost{Records: len(recs), Bytes: bytes}
	if err := db.adm.Acquire(ctx, &c, false); err != nil {
		return err
	}
	defer db.adm.Release(&c)
	req := newRequest()
	req.verbatim, req.sync = recs, !db.opts.NoSync
	db.commit.commit(req)
	err := req.err
	freeRequest(req)
	return err
}
