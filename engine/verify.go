package engine

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/engine/internal/scratch"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2"
)

// Verification (SPEC §10 `verify`) checks the logs against themselves and
// every projection against the logs:
//
//	per anchor, streaming over its segment files with segment.Scanner:
//	  every record hash, every prev_hash link, dense seqs from the segment
//	  headers, strictly increasing counters, headers that continue the chain
//	  across segments, every segment but the newest sealed with a seal that
//	  matches; the 's' rows (location, size, counter, hash of every seq, and
//	  no others); the 'k' and 'i' rows the records imply (and no others);
//	  the Merkle tree recomputed from the chain against the 'n' rows and
//	  against the in-memory compact range; the visible head and the 'a' row.
//	then: the 'k' rows below a rebuild from a snapshot's frontier against
//	the state there (verify_histfrom.go), stored checkpoints against the
//	recomputed trees and one another, segment directories the index does
//	not know, and snapshots (a hook).
//
// Anchors are checked in parallel (Threads); one anchor is one sequential
// pass. The index is read from one Pebble snapshot, taken after the heads
// were captured, so a database that keeps taking appends verifies at a
// consistent point: see verify_hooks.go for the ordering this relies on.
//
// Every problem is a Finding; Verify never stops at the first one unless
// StopAtFirst is set, and damaged anchors are checked like the others.

// VerifyOptions configure Verify. The zero value checks everything.
type VerifyOptions struct {
	// Anchors restricts the check to these anchors; empty means all. An
	// anchor the database does not know is STATE_003.
	Anchors []string
	// Threads is the number of anchors checked at once; 0 means GOMAXPROCS.
	Threads int
	// StopAtFirst ends verification at the first finding.
	StopAtFirst bool
	// Progress, if set, is called now and then from one goroutine, and once
	// at the end.
	Progress func(VerifyProgress)
	// From, if set, is a trusted checkpoint of this database (open it with
	// proof.OpenCheckpoint): for each anchor it lists, only the records
	// after its size are checked, after the anchor's tree at that size is
	// shown to have the checkpoint's root and the last record it covers to
	// be that tree's last leaf. Anchors it does not list are checked in full.
	From *proof.Checkpoint
	// VerifierKeys, if set, are the note verifier keys the checkpoints
	// stored in the database must be signed with (AUTH_003 otherwise); a
	// malformed key fails Verify with INPUT_001. Without them only the
	// checkpoints' bodies are checked.
	VerifierKeys []string
	// SkipSnapshots leaves out the snapshot files, their replay proofs and
	// the audit log (the slowest part on a database with large snapshots).
	// Otherwise each snapshot is proved as VerifySnapshot proves it
	// (INT_003 findings), one the audit log records as created and not
	// removed must be there (INT_003), and the audit log's chain must hold
	// every line the index saw appended (INT_002).
	SkipSnapshots bool
}

// VerifyProgress is what Verify has done so far.
type VerifyProgress struct {
	Anchors     int    // anchors to check
	AnchorsDone int    // anchors checked
	Records     uint64 // records checked
	Bytes       int64  // segment bytes read
	TotalBytes  int64  // segment bytes of the anchors to check
}

// Finding is one problem Verify found. Code is one of INT_001 (a hash does
// not match: a record, a header, a tree root), INT_002 (the chain is broken:
// a link, a seq, a seal, a missing segment or record), INT_003 (a snapshot),
// INT_004 (the index disagrees with the segments), AUTH_003 (a checkpoint's
// signature). Anchor, Seq, File and Offset locate it where it has a place:
// File and Offset name the segment file and the byte offset of the damaged
// frame (0 for a header; the seal's offset for a seal), or the snapshot file
// and the offset its reader located the damage at (0 for its header or the
// file as a whole). Message says what is wrong without the code and reason,
// which Code and Reason carry.
type Finding struct {
	Code    Code   `json:"code"`
	Reason  string `json:"reason"`
	Anchor  string `json:"anchor"`
	Seq     uint64 `json:"seq"`
	File    string `json:"file"`
	Offset  int64  `json:"offset"`
	Message string `json:"message"`
}

// Error returns the finding as one line.
func (f Finding) Error() string { return f.Err().Error() }

// Unwrap returns the finding as a coded *Error, so errors.As reads a
// finding's code as any error's.
func (f Finding) Unwrap() error { return f.Err() }

// Err returns the finding as a coded *Error.
func (f Finding) Err() *Error {
	return (&errs.Error{Code: f.Code, Message: f.Message}).At(f.Anchor, f.Seq, f.File, f.Offset)
}

// VerifyReport is the result of Verify, in the SPEC §10 JSON shape:
// {"ok","anchors","records","bytes","failures":[{"code","reason","anchor","seq","file","offset","message"}]}.
type VerifyReport struct {
	OK       bool      `json:"ok"`
	Anchors  int       `json:"anchors"`
	Records  uint64    `json:"records"`
	Bytes    int64     `json:"bytes"`
	Failures []Finding `json:"failures"`
	// Files is set when the check read the files alone, without the index
	// (a read-only open that cannot use it): what it did not cover, and
	// where newest segments ended early (fileverify.go).
	Files *FilesCheck `json:"files,omitempty"`
}

// Verify checks the database (or the anchors opts names) and reports what it
// finds. It returns an error only when it cannot check: a bad option
// (INPUT_001), an unknown anchor (STATE_003), an I/O failure (IO_001) or the
// end of ctx; the report then holds what was found so far.
func (db *DB) Verify(ctx context.Context, opts VerifyOptions) (VerifyReport, error) {
	if db.closed.Load() {
		return VerifyReport{}, errClosed
	}
	if db.filesOnly() {
		return db.verifyFiles(ctx, opts) // a read-only open without the index
	}
	if err := db.beginRead(ctx); err != nil {
		return VerifyReport{}, err
	}
	defer db.endRead()
	// A malformed key is bad input, not a signature every stored checkpoint
	// fails (nor nothing at all, when none is stored).
	if err := proof.CheckVerifierKeys(opts.VerifierKeys...); err != nil {
		return VerifyReport{}, fmt.Errorf("verify: %w", err)
	}
	v := &verifier{db: db, opts: opts, parent: ctx, seeds: newDigestSeeds(),
		retained: scratch.NewRowSpill(db.openScratch, "verify-kept", rowSpillBytes),
		deferred: scratch.NewRowSpill(db.openScratch, "verify-deferred", rowSpillBytes)}
	v.ctx, v.cancel = context.WithCancel(ctx)
	defer v.cancel()
	if opts.From != nil {
		if err := opts.From.Validate(); err != nil {
			return VerifyReport{}, fmt.Errorf("checkpoint to verify from: %w", err)
		}
		if want := proof.CheckpointOrigin(db.id); opts.From.Origin != want {
			return VerifyReport{}, errs.New(errs.CodeInvalidInput, "checkpoint to verify from is of %q, this database is %q", opts.From.Origin, want)
		}
	}
	// NB: from before the index snapshot until the files it names are read:
	// a truncation that removed a listed segment in between was reported as
	// damage (db.removing). Let go before the snapshots' check, which waits
	// for a compaction, which may wait for this.
	db.removing.RLock()
	v.removing = true
	defer v.readFilesDone()
	if err := v.prepare(); err != nil {
		v.close()
		return VerifyReport{}, err
	}
	if db.testVerifyPrepared != nil {
		db.testVerifyPrepared()
	}
	err := v.run()
	v.close()
	if perr := ctx.Err(); perr != nil && err == nil {
		err = perr
	}
	for _, f := range v.logFindings {
		db.noteDamage(f.Anchor, f.Err()) // SPEC §3: read-only from now on
	}
	return v.result(), err
}

// rowSpillBytes is how many bytes of 'k' rows verify keeps in memory for
// its checks after the pass over them (the rows kept for truncated records
// and those a rebuild from a snapshot wrote, as many as the index has keys)
// before they spill to a scratch store (scratch.RowSpill). A variable so
// tests can spill.
var rowSpillBytes = scratch.DefaultSpillBytes

// verifier is one run of Verify.
type verifier struct {
	db     *DB
	opts   VerifyOptions
	parent context.Context
	ctx    context.Context // ends at StopAtFirst or when parent ends
	cancel context.CancelFunc
	snap   *pebble.Snapshot
	seeds  digestSeeds

	jobs       []*anchorCheck
	byID       map[string]*anchorCheck
	restricted bool
	known      map[string]bool // every anchor with an 'a' row in snap
	stored     []StoredCheckpoint

	kActual  map[string]*rowDigest // 'k' rows found, per anchor (k pass)
	retained *scratch.RowSpill     // 'k' rows kept for truncated records
	deferred *scratch.RowSpill     // 'k' rows a rebuild from a snapshot wrote
	histFrom map[string]uint64     // per anchor: history up to here came from a snapshot
	hist     *histCheck            // the state at histFrom, when this run checks it

	removing bool // holds db.removing (read)
	files    bool // a check from the files alone (fileverify.go)

	mu          sync.Mutex
	findings    []Finding
	logFindings []Finding // of findings, those about an anchor's own log or index (not a checkpoint's claim)
	ioErr       error

	records     atomic.Uint64
	bytes       atomic.Int64
	anchorsDone atomic.Int64
	totalBytes  int64
}

// report records a finding.
func (v *verifier) report(f Finding) {
	f.Reason = f.Code.Reason()
	v.mu.Lock()
	v.findings = append(v.findings, f)
	v.mu.Unlock()
	if v.opts.StopAtFirst {
		v.cancel()
	}
}

// fail records an error that stops the check of one part (I/O, not a
// finding); the first one is returned by Verify.
func (v *verifier) fail(err error) {
	v.mu.Lock()
	if v.ioErr == nil {
		v.ioErr = err
	}
	v.mu.Unlock()
}

// halted reports whether verification must stop.
func (v *verifier) halted() bool { return v.ctx.Err() != nil }

// prepare captures every anchor's visible state, then takes the index
// snapshot every later read uses.
func (v *verifier) prepare() error {
	db := v.db
	// NB: the stored checkpoints first: each was signed from views taken
	// before it was stored, so before ours, and the snapshot below holds
	// every record it lists. One stored after the snapshot could list
	// records the snapshot does not hold.
	var err error
	if v.stored, err = db.Checkpoints(v.ctx); err != nil {
		return err
	}
	ids, err := db.anchorIDs()
	if err != nil {
		return err
	}
	want := ids
	if len(v.opts.Anchors) > 0 {
		v.restricted = true
		have := make(map[string]bool, len(ids))
		for _, id := range ids {
			have[id] = true
		}
		want = nil
		for _, id := range v.opts.Anchors {
			if err := segment.ValidateAnchorID(id); err != nil {
				return err
			}
			if !have[id] {
				return errs.New(errs.CodeDependencyMissing, "anchor %q is not in the database", id).At(id, 0, "", 0)
			}
			if !slices.Contains(want, id) {
				want = append(want, id)
			}
		}
		slices.Sort(want)
	}
	v.byID = make(map[string]*anchorCheck, len(want))
	for _, id := range want {
		c := &anchorCheck{v: v, id: id, dir: segment.AnchorDir(db.fs, db.dir, id)}
		a, err := db.loadedAnchor(id)
		switch {
		case err != nil:
			c.loadErr = err
		case a != nil:
			c.a, c.view, c.hasView = a, a.view(), true
		}
		v.jobs = append(v.jobs, c)
		v.byID[id] = c
	}
	// NB: the snapshot comes after the views: it holds every row a view
	// covers (rows are applied before heads are published).
	v.snap = db.index.NewSnapshot()
	v.known = make(map[string]bool, len(ids))
	it, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: []byte{schema.TagAnchor}, UpperBound: []byte{schema.TagAnchor + 1}})
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "index iterator")
	}
	for ok := it.First(); ok; ok = it.Next() {
		v.known[string(it.Key()[1:])] = true
	}
	if err := it.Close(); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "read anchors")
	}
	if v.histFrom, err = loadHistoryFrom(v.snap); err != nil {
		return err
	}
	if err := v.openHistCheck(); err != nil {
		return err
	}
	v.planCheckpointRoots()
	if v.opts.Progress != nil {
		for _, c := range v.jobs {
			v.totalBytes += c.diskBytes()
		}
	}
	return nil
}

// planCheckpointRoots tells each anchor check the tree sizes whose roots the
// checkpoints need, so the roots are taken from the chain as it is hashed.
func (v *verifier) planCheckpointRoots() {
	add := func(cp *proof.Checkpoint) {
		for _, e := range cp.Entries {
			if c := v.byID[e.Anchor]; c != nil {
				c.wanted = append(c.wanted, e.Size)
			}
		}
	}
	for _, s := range v.stored {
		if s.Checkpoint != nil {
			add(s.Checkpoint)
		}
	}
	if v.opts.From != nil {
		for _, e := range v.opts.From.Entries {
			if c := v.byID[e.Anchor]; c != nil {
				e := e
				c.from = &e
				c.wanted = append(c.wanted, e.Size)
			}
		}
	}
	for _, c := range v.jobs {
		slices.Sort(c.wanted)
		c.wanted = slices.Compact(c.wanted)
	}
}

func (v *verifier) close() {
	v.retained.Close()
	v.deferred.Close()
	if v.hist != nil {
		v.hist.close()
		v.hist = nil
	}
	if v.snap != nil {
		_ = v.snap.Close()
		v.snap = nil
	}
}

// run checks the anchors on Threads workers, with the pass over the 'k'
// rows as one more task, then what needs them all.
func (v *verifier) run() error {
	threads := v.opts.Threads
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	stopProgress := v.startProgress()
	tasks := make(chan func(), len(v.jobs)+1)
	tasks <- v.keyRowPass
	for _, c := range v.jobs {
		tasks <- c.run
	}
	close(tasks)
	var wg sync.WaitGroup
	for range min(threads, len(v.jobs)+1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for task := range tasks {
				if v.halted() {
					continue
				}
				v.guard(task)
			}
		}()
	}
	wg.Wait()
	if !v.halted() {
		v.guard(v.compareKeyRows)
	}
	if !v.halted() {
		v.guard(v.checkRetained)
	}
	if !v.halted() {
		v.guard(v.checkDeferred)
	}
	if !v.halted() {
		v.guard(v.checkHistoryFrom)
	}
	if !v.halted() && !v.restricted {
		v.guard(v.unknownDirectories)
	}
	if !v.halted() && !v.restricted {
		v.guard(v.unknownAnchorRows)
	}
	if !v.halted() {
		v.guard(v.foreignJournalEntries)
	}
	v.readFilesDone()
	if !v.halted() {
		v.guard(v.checkCheckpoints)
	}
	if !v.halted() {
		v.guard(v.checkSnapshots)
	}
	stopProgress()
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.ioErr
}

// readFilesDone lets a truncation remove segment files again.
func (v *verifier) readFilesDone() {
	if v.removing {
		v.removing = false
		v.db.removing.RUnlock()
	}
}

// guard runs one part of the check, turning a panic — a bug, never an
// answer — into an error instead of taking the caller down.
func (v *verifier) guard(task func()) {
	defer func() {
		if r := recover(); r != nil {
			v.fail(errs.New(errs.CodeWriteFailed, "verify: internal error: %v", r))
		}
	}()
	task()
}

// startProgress reports progress every 100 ms until the returned function is
// called, which reports once more.
func (v *verifier) startProgress() func() {
	if v.opts.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				v.opts.Progress(v.progress())
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
		v.opts.Progress(v.progress())
	}
}

func (v *verifier) progress() VerifyProgress {
	return VerifyProgress{
		Anchors: len(v.jobs), AnchorsDone: int(v.anchorsDone.Load()),
		Records: v.records.Load(), Bytes: v.bytes.Load(), TotalBytes: v.totalBytes,
	}
}

// result builds the report, findings sorted by anchor, file, offset.
func (v *verifier) result() VerifyReport {
	v.mu.Lock()
	defer v.mu.Unlock()
	fs := slices.Clone(v.findings)
	slices.SortStableFunc(fs, func(a, b Finding) int {
		return cmp.Or(strings.Compare(a.Anchor, b.Anchor), strings.Compare(a.File, b.File),
			cmp.Compare(a.Offset, b.Offset), cmp.Compare(a.Seq, b.Seq))
	})
	if fs == nil {
		fs = []Finding{}
	}
	return VerifyReport{OK: len(fs) == 0 && v.ioErr == nil, Anchors: len(v.jobs),
		Records: v.records.Load(), Bytes: v.bytes.Load(), Failures: fs}
}

// unknownDirectories reports anchor directories that hold segments of an
// anchor the index does not know.
func (v *verifier) unknownDirectories() {
	db := v.db
	known := make(map[string]bool, len(v.known))
	for id := range v.known {
		known[segment.AnchorPathID(id)] = true
	}
	root := db.fs.PathJoin(db.dir, segment.AnchorsDir)
	fans, err := fsutil.List(db.fs, root)
	if err != nil {
		if e := foreignOf(err); e != nil {
			v.report(Finding{Code: e.Code, File: e.File, Message: e.Message})
		} else if !oserrorIsNotExist(err) {
			v.fail(errs.Wrap(errs.CodeWriteFailed, err, "list %s", root))
		}
		return
	}
	slices.Sort(fans)
	for _, fan := range fans {
		if len(fan) != 2 || !isHex(fan) {
			continue
		}
		// NB: a fan-out entry that is not a directory (a FIFO, whose list
		// would block) is a finding; the anchors the index knows there
		// report their own.
		subs, err := listTreeDir(db.fs, db.fs.PathJoin(root, fan))
		if e := foreignOf(err); e != nil {
			v.report(Finding{Code: e.Code, File: e.File, Message: e.Message})
			continue
		}
		if err != nil {
			v.fail(err)
			return
		}
		slices.Sort(subs)
		for _, sub := range subs {
			if len(sub) != 30 || !isHex(sub) || known[fan+sub] {
				continue
			}
			dir := db.fs.PathJoin(root, fan, sub)
			segs, err := listSegments(db, dir)
			if e := foreignOf(err); e != nil {
				v.report(Finding{Code: e.Code, File: e.File, Message: e.Message})
				continue
			}
			if err != nil {
				v.fail(err)
				return
			}
			if len(segs) == 0 {
				continue
			}
			anchor := ""
			if h, _, err := readSegmentHeader(db, segs[0].path); err == nil {
				anchor = h.Anchor
			}
			v.report(Finding{Code: errs.CodeIndexMismatch, Anchor: anchor, File: segs[0].path,
				Message: fmt.Sprintf("directory %s holds %s of anchor %q, which the index does not know", dir, plural(len(segs), "segment file"), anchor)})
		}
	}
}

// unknownAnchorRows reports the 'i', 'n', 'r' and 's' rows of anchors the
// index does not know (no 'a' row): they project no log, yet an append to
// such an anchor would read them (an 'i' row answers its idempotency key).
// The 'k' rows are keyRowPass's. One seek per anchor and table: the rows
// of known anchors are passed over, not read.
func (v *verifier) unknownAnchorRows() {
	for _, tag := range []byte{schema.TagIdem, schema.TagNode, schema.TagKept, schema.TagSeq} {
		it, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: []byte{tag}, UpperBound: []byte{tag + 1}})
		if err != nil {
			v.fail(errs.Wrap(errs.CodeWriteFailed, err, "index iterator"))
			return
		}
		for ok := it.First(); ok && !v.halted(); {
			k := it.Key()
			end := bytes.IndexByte(k[1:], 0)
			if end < 0 {
				v.report(Finding{Code: errs.CodeIndexMismatch, Message: fmt.Sprintf("malformed %s key %x", schema.RowName(k), k)})
				ok = it.Next()
				continue
			}
			id := string(k[1 : 1+end])
			if !v.known[id] {
				v.report(Finding{Code: errs.CodeIndexMismatch, Anchor: id,
					Message: fmt.Sprintf("%s %x names anchor %q, which the index does not know", schema.RowName(k), k, id)})
			}
			ok = it.SeekGE(schema.PrefixEnd(schema.AnchorPrefix(tag, id)))
		}
		err = it.Error()
		if cerr := it.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			v.fail(errs.Wrap(errs.CodeWriteFailed, err, "index iterator"))
			return
		}
	}
}

// auditPastHead reports lines of the audit log past the head the index
// recorded (with the line an append recorded as next): the chain has no
// key, so anyone can extend it, and such a line is not the database's. It
// vouches for nothing, and the database appends nothing after it (INT_002),
// so verify says so too. An index without a head row (from before the
// head was kept) has nothing to compare.
func (v *verifier) auditPastHead(head snapshot.AuditHead) error {
	db := v.db
	_, hasHead, err := db.metaBytes(schema.MetaAudit)
	if err != nil || !hasHead {
		return err
	}
	n, _, err := db.auditHead()
	if err != nil || head.Lines <= n {
		return err
	}
	v.report(Finding{Code: errs.CodeChainBroken, File: db.AuditPath(), Seq: n + 1, Message: fmt.Sprintf(
		"audit log has %s past the %d the database wrote: lines it did not write vouch for nothing, and nothing more is appended after them", plural(head.Lines-n, "line"), n)})
	return nil
}

// checkSnapshots verifies every snapshot, its replay proof included (INT_003
// for each that fails, and for each the audit log records as created and not
// removed whose file is missing), and the audit log's chain against the head
// the index recorded (INT_002).
func (v *verifier) checkSnapshots() {
	if v.opts.SkipSnapshots {
		return
	}
	db := v.db
	// The snapshots and the audit log as one compaction (or CreateSnapshot)
	// left them: one that removed a listed snapshot before its turn made
	// Verify fail on a file that no longer exists, and a cut below one
	// under its replay could fail the replay.
	db.compactMu.Lock()
	defer db.compactMu.Unlock()
	list, err := db.Snapshots(v.ctx)
	if err != nil {
		v.fail(err)
		return
	}
	// The audit log first: the snapshots it records as created must be
	// there, if the log verifies.
	var vouched map[string]snapshot.AuditItem
	if head, err := db.verifyAuditLog(); err != nil { // Verify holds the read gate
		var e *errs.Error
		if !errors.As(err, &e) || !e.Code.IsIntegrity() {
			v.fail(err)
			return
		}
		v.report(Finding{Code: e.Code, File: db.AuditPath(), Seq: e.Seq, Offset: e.Offset, Message: errs.Message(err)})
	} else if vouched, err = db.auditedSnapshots(); err != nil {
		v.fail(err)
		return
	} else if err := v.auditPastHead(head); err != nil {
		v.fail(err)
		return
	}
	for _, s := range list {
		if v.ctx.Err() != nil {
			return
		}
		err := s.Err
		if err == nil {
			// NB: VerifySnapshot holds a snapshot no replay can prove to
			// the audit log's record of its creation: anyone can write a
			// well-formed one.
			_, err = db.VerifySnapshot(v.ctx, s.Path)
		}
		if err == nil {
			continue
		}
		var e *errs.Error
		if !errors.As(err, &e) || !e.Code.IsIntegrity() {
			v.fail(err)
			return
		}
		// NB: the reader locates the damage in the file (a frame, the
		// footer); the finding keeps that offset, as snapshot verify does.
		f := Finding{Code: errs.CodeSnapshotCorrupted, File: s.Path, Offset: e.Offset, Message: errs.Message(err)}
		if e.File != "" && e.File != s.Path {
			f.Offset = 0 // located in another file (a base snapshot): not a place in this one
		}
		v.report(f)
	}
	// NB: only a compaction removes a snapshot, and it audits the removal
	// before it deletes the file. One the log records as created and not
	// removed is the database's; its file gone is a loss, and after a
	// truncation below its frontier it was the only copy of that state.
	present := make(map[string]bool, len(list))
	for _, s := range list {
		present[s.Name] = true
	}
	names := slices.Sorted(maps.Keys(vouched))
	for _, name := range names {
		if !present[name] && !v.halted() {
			v.report(Finding{Code: errs.CodeSnapshotCorrupted, File: db.fs.PathJoin(db.SnapshotsDir(), name), Message: fmt.Sprintf(
				"snapshot %s, which the audit log records as created and not as removed, is missing", name)})
		}
	}
}
