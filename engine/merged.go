package engine

import (
	"context"
	"fmt"
	"iter"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/merge"
	"github.com/anchordb/anchordb/segment"
)

// The merged view (SPEC §1, §4): every anchor's log in one order by
// (counter, anchor id bytes), numbered from 1. It is streamed by a k-way
// merge that holds a few records per anchor, never a whole log.

// Frontier returns the current frontier: every anchor with at least one
// record, at its visible head. Any such vector is a valid frontier (a prefix
// of every log), so anchors are read one after another without a global
// pause.
func (db *DB) Frontier(ctx context.Context) (merge.Frontier, error) {
	f := merge.Frontier{}
	for info, err := range db.Anchors(ctx) {
		if err != nil {
			return nil, err
		}
		if info.Records > 0 {
			f[info.ID] = info.Records
		}
	}
	return f, nil
}

// checkFrontier refuses a frontier that names an unknown anchor or a seq
// beyond an anchor's head (STATE_003).
func (db *DB) checkFrontier(f merge.Frontier) error {
	if err := f.Validate(); err != nil {
		return err
	}
	for _, id := range f.Anchors() {
		info, ok, err := db.anchorInfo(id) // callers waited for visibility
		if err != nil {
			return err
		}
		if !ok || info.Records < f[id] {
			have := uint64(0)
			if ok {
				have = info.Records
			}
			e := errs.New(errs.CodeDependencyMissing, "frontier names seq %d of anchor %q, which has %s", f[id], id, plural(have, "record"))
			e.Anchor, e.Seq = id, f[id]
			return e
		}
	}
	return nil
}

// MergedOptions select part of the merged view.
type MergedOptions struct {
	// From is the first position to return (1-based); 0 or 1 start at the
	// beginning. Earlier records are still read to number the stream.
	From uint64
	// Frontier bounds the view; nil means the current frontier.
	Frontier merge.Frontier
	// After, if set, leaves out each anchor's records up to After[anchor]:
	// the view of what came after an earlier frontier (positions then count
	// from the first record after it). An After inside an anchor's
	// truncated log is STATE_003: the records from there to the cut are
	// gone, and the view would lack them without a word.
	After merge.Frontier
}

// Positioned is a record of the merged view with its 1-based position in
// the merged order.
type Positioned struct {
	Pos uint64
	Record
}

// Merged streams the merged view with global positions. Memory is a small
// buffer per anchor, independent of the length of the logs. A yielded record
// is the caller's to keep.
//
// Positions are in the merged order of every record, those a truncating
// compaction removed included (their counters stay in the index and the
// stubs), so a record's position does not change when a compaction runs,
// and MergedRoot is over the same list. A removed record the compaction
// kept a copy of (a key's last record in a removed segment) is yielded like
// any other; a run of consecutive positions whose records are gone yields,
// in its place, one STATE_003 *Error (Anchor and Seq of the run's first
// record; the message names the positions); a loop that goes on after it
// gets the records after the run.
func (db *DB) Merged(ctx context.Context, opts MergedOptions) iter.Seq2[Positioned, error] {
	return func(yield func(Positioned, error) bool) {
		var first, last merge.Positioned // the run of gone positions not yet reported
		report := func() bool {
			if first.Pos == 0 {
				return true
			}
			run := fmt.Sprintf("position %d", first.Pos)
			if last.Pos > first.Pos {
				run = fmt.Sprintf("positions %d..%d", first.Pos, last.Pos)
			}
			e := errs.New(errs.CodeDependencyMissing, "the records at %s of the merged view (the first: anchor %q seq %d) were removed by a compaction, which keeps of a removed segment only each key's last record",
				run, first.Record.Anchor, first.Record.Seq).At(first.Record.Anchor, first.Record.Seq, "", 0)
			first = merge.Positioned{}
			return yield(Positioned{}, e)
		}
		for p, err := range db.merged(ctx, opts, keptOrGone) {
			if err == nil && isGone(&p.Record) {
				if first.Pos == 0 {
					first = p
				}
				last = p
				continue
			}
			if !report() {
				return
			}
			if err != nil {
				yield(Positioned{}, err)
				return
			}
			if !yield(Positioned{Pos: p.Pos, Record: newRecord(&p.Record)}, nil) {
				return
			}
		}
		report()
	}
}

// merged is Merged in the codec's form; mode says what it yields for a
// record a compaction removed. With skipTruncated, the positions count the
// records yielded only.
func (db *DB) merged(ctx context.Context, opts MergedOptions, mode truncatedMode) iter.Seq2[merge.Positioned, error] {
	return func(yield func(merge.Positioned, error) bool) {
		if err := db.beginRead(ctx); err != nil {
			yield(merge.Positioned{}, err)
			return
		}
		defer db.endRead()
		f := opts.Frontier
		if f == nil {
			var err error
			if f, err = db.Frontier(ctx); err != nil {
				yield(merge.Positioned{}, err)
				return
			}
		} else if err := db.checkFrontier(f); err != nil {
			yield(merge.Positioned{}, err)
			return
		}
		anchors := f.Anchors()
		// A refill reads this many records of one anchor at a time: enough to
		// amortise a seek, small enough that 100,000 anchors stay in memory.
		batch := uint64(max(4, min(256, (1<<16)/max(1, len(anchors)))))
		sources := make([]merge.Source, 0, len(anchors))
		// One read buffer for every source: Merge refills one source at a
		// time, and a refill's records are copies. A buffer each (32 KiB
		// of read-ahead) held 3.3 GB over 100,000 anchors.
		shared := new([]byte)
		for _, id := range anchors {
			if f[id] == 0 {
				continue
			}
			if opts.After[id] >= f[id] {
				continue
			}
			if after := opts.After[id]; after > 0 && mode == skipTruncated {
				// A view after an earlier frontier inside the truncated log
				// would silently lack the records from there to the cut.
				db.truncating.RLock() // cutOf caches: no truncation in between
				first, err := db.cutOf(id)
				db.truncating.RUnlock()
				if err != nil {
					yield(merge.Positioned{}, err)
					return
				}
				if after < first-1 {
					e := errs.New(errs.CodeDependencyMissing, "anchor %q: the view after seq %d needs records %d..%d, which compaction truncated", id, after, after+1, first-1)
					e.Anchor, e.Seq = id, after+1
					yield(merge.Positioned{}, e)
					return
				}
			}
			// After a frontier the log goes on densely from After+1: a
			// truncation that lands before the first refill is a gap too.
			sources = append(sources, &logSource{db: db, ctx: ctx, anchor: id, next: opts.After[id] + 1, last: f[id], batch: batch,
				started: opts.After[id] > 0 || mode != skipTruncated, shared: shared, mode: mode})
		}
		var mo []merge.Option
		if opts.From > 1 {
			mo = append(mo, merge.WithFrom(opts.From))
		}
		for p, err := range merge.Merge(ctx, sources, mo...) {
			if err != nil {
				yield(merge.Positioned{}, err)
				return
			}
			if !yield(p, nil) {
				return
			}
		}
	}
}

// gap reports records from..to missing from the anchor's log: truncated by
// a compaction since the read began (STATE_003: the read cannot go on), or
// missing from the index (INT_002).
func (s *logSource) gap(from, to uint64) error {
	if row, ok, err := s.db.location(s.anchor, from); err == nil && ok && row.Size == 0 {
		e := errs.New(errs.CodeDependencyMissing, "anchor %q: records %d..%d were truncated by a compaction while this read ran", s.anchor, from, to)
		e.Anchor, e.Seq = s.anchor, from
		return e
	}
	e := errs.New(errs.CodeChainBroken, "anchor %q: records %d..%d are missing from the index", s.anchor, from, to)
	e.Anchor, e.Seq = s.anchor, from
	return e
}

// logSource reads one anchor's records [next, last] in small batches.
type logSource struct {
	started bool         // a record was read: the log goes on densely from here
	fr      *frameReader // kept across refills
	shared  *[]byte      // the read buffer, lent to fr for a refill
	db      *DB
	ctx     context.Context
	anchor  string
	next    uint64
	last    uint64
	batch   uint64
	buf     []segment.Record
	pos     int
	mode    truncatedMode
}

func (s *logSource) Next() (segment.Record, bool, error) {
	for s.pos == len(s.buf) {
		if s.next > s.last {
			return segment.Record{}, false, nil
		}
		to := min(s.last, s.next+s.batch-1)
		s.buf, s.pos = s.buf[:0], 0
		// Log skips records that compaction truncated: an anchor's log may
		// start after seq 1, never with a gap later on.
		if s.fr == nil {
			s.fr = s.db.newFrameReader(s.anchor)
			// What a refill of small records needs: the buffer does not
			// outlive the refill, and 32 KiB read for 4 records would
			// read most of it for nothing.
			s.fr.readAhead = int64(min(32<<10, s.batch*256))
		}
		// Empty: what it held last was another source's.
		s.fr.buf, s.fr.bufOff = (*s.shared)[:0], 0
		var failed error
		s.db.logRange(s.ctx, s.anchor, s.next, to, s.fr, s.mode, func(rec segment.Record, err error) bool {
			if err != nil {
				failed = err
				return false
			}
			want := s.next // a refill continues where the last one ended
			if n := len(s.buf); n > 0 {
				want = s.buf[n-1].Seq + 1
			} else if !s.started {
				want = rec.Seq // the log may start after a cut
			}
			if rec.Seq != want {
				failed = s.gap(want, rec.Seq-1)
				return false
			}
			s.started = true
			s.buf = append(s.buf, rec)
			return true
		})
		// Hold no file between refills: 100,000 sources must not pin
		// 100,000 descriptors.
		s.fr.close()
		*s.shared, s.fr.buf = s.fr.buf[:0], nil // it may have grown
		if failed != nil {
			return segment.Record{}, false, failed
		}
		if n := len(s.buf); n > 0 && s.buf[n-1].Seq != to {
			return segment.Record{}, false, s.gap(s.buf[n-1].Seq+1, to)
		}
		if len(s.buf) == 0 && s.started {
			// A whole refill gone: truncated since the read began.
			return segment.Record{}, false, s.gap(s.next, to)
		}
		s.next = to + 1
	}
	rec := s.buf[s.pos]
	s.pos++
	return rec, true, nil
}

// MergedRoot returns the RFC 6962 root over the record hashes of the merged
// view at a frontier (nil: the current one) and its size. It covers every
// record of every anchor up to the frontier, those a truncating compaction
// removed included: their hashes and counters stay in the index and the
// stubs (docs/FORMAT.md §2.2, §4.8). So the root is a function of the
// records alone — two databases with the same records have the same root,
// whatever either compacted, a compaction leaves it as it was, and with one
// anchor it is that anchor's tree root — and it is known at any frontier,
// one inside a truncated log included. Records still in their segments are
// read and checked against their hashes.
func (db *DB) MergedRoot(ctx context.Context, f merge.Frontier) (segment.Hash, uint64, error) {
	return merge.Root(db.merged(ctx, MergedOptions{Frontier: f}, hashesOnly))
}

// GetAt returns the value of key in the state at frontier f: the last put or
// delete of it in merged order among the records f contains. A key with no
// such version, or deleted, returns ErrNotFound. A frontier naming an anchor
// the database does not hold, a seq past an anchor's head, or one inside its
// truncated log, is STATE_003.
func (db *DB) GetAt(ctx context.Context, key []byte, f merge.Frontier) (Version, error) {
	if err := db.beginRead(ctx); err != nil {
		return Version{}, err
	}
	defer db.endRead()
	// A frontier naming an anchor we hold nothing of, or a seq past an
	// anchor's head, names records that do not exist here (yet): the answer
	// would change with the next append or ingest (SPEC §8 STATE_003, as in
	// Merged).
	if err := db.checkFrontier(f); err != nil {
		return Version{}, err
	}
	// Compaction keeps, of the segments it removes, each key's newest version
	// in each: the state at a frontier at or above the cut is known, inside
	// the truncated part it is not. A truncation that runs meanwhile waits:
	// the cut checked here and the versions read below are of one index.
	db.truncating.RLock()
	defer db.truncating.RUnlock()
	for _, id := range f.Anchors() {
		first, err := db.cutOf(id)
		if err != nil {
			return Version{}, err
		}
		if f[id] < first-1 {
			e := errs.New(errs.CodeDependencyMissing, "the frontier names seq %d of anchor %q, whose log was truncated through seq %d", f[id], id, first-1)
			e.Anchor, e.Seq = id, f[id]
			return Version{}, e
		}
	}
	// A rebuild from a snapshot indexed the state at the snapshot's frontier,
	// not the versions below it: the state at a frontier that does not
	// contain the snapshot's is not known (a full rebuild brings it back).
	for id, seq := range db.histFrom {
		if f[id] < seq {
			e := errs.New(errs.CodeDependencyMissing, "the frontier names seq %d of anchor %q; the index was rebuilt from a snapshot at seq %d and holds no older versions (run rebuild-index without --from-snapshot)", f[id], id, seq)
			e.Anchor, e.Seq = id, f[id]
			return Version{}, e
		}
	}
	it, err := db.versionRows(db.index, key)
	if err != nil {
		return Version{}, err
	}
	defer it.Close()
	// Versions are newest first: the first one inside f wins.
	for ok := it.First(); ok; ok = it.Next() {
		if err := ctx.Err(); err != nil {
			return Version{}, err
		}
		_, _, anchor, err := schema.ParseVersionKey(it.Key())
		if err != nil {
			return Version{}, errs.Wrap(errs.CodeIndexMismatch, err, "read index")
		}
		ve, err := schema.DecodeVersion(it.Value())
		if err != nil {
			return Version{}, errs.Wrap(errs.CodeIndexMismatch, err, "key %q", key)
		}
		if !f.Contains(anchor, ve.Seq) {
			continue
		}
		v, err := db.decodeVersion(ctx, it.Key(), it.Value())
		if err != nil {
			return Version{}, err
		}
		if v.Deleted {
			return Version{Key: key, Deleted: true, Receipt: v.Receipt}, ErrNotFound
		}
		return v, nil
	}
	if err := it.Error(); err != nil {
		return Version{}, errs.Wrap(errs.CodeWriteFailed, err, "read index")
	}
	return Version{Key: key}, ErrNotFound
}
