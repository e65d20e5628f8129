package engine

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
)

// Verify from the files alone: what a read-only open runs when it cannot
// use the index (another process has the database open for writing, or
// only a writer's recovery would bring the index up to date). It checks
// every anchor's log as its files hold it (filelog.go): every record's
// hash, every link and seq, counters increasing, segment headers, seals and
// stubs, and, after the newest segment, the journal's frames that continue
// the chain; then the stored checkpoints (and VerifyOptions.From) against
// the trees of those logs, their file names, their origin and, given keys,
// their signatures. What only the index shows is not checked, and the
// report says so (FilesCheck): the index itself, the snapshots and their
// replay proofs, the audit log, and anchor directories no segment names.
//
// No finding is made of what a writer at work can leave: the newest
// segment's tail ends the prefix (a FileTail, not a finding), a segment
// removed by a truncation is read from its stub, a journal file deleted by
// a settle is read from the segments. Damage is found where the writer
// never writes again (a segment with a successor, a stub) and where it
// wrote before the check began (a stored checkpoint names records the
// files must hold: they were made durable before the note was written).
// And an anchor found damaged is read again, a moment later, from a fresh
// listing and journal: only what both reads find is reported, so a state
// a writer's recovery passes through (it rewrites an unsettled segment in
// place while it opens) is not taken for damage.

// FilesCheck is how a check from the files alone differs from a full one.
type FilesCheck struct {
	// Why says why the index was not used.
	Why string `json:"why"`
	// Unchecked names what only a check with the index covers: "index",
	// "snapshots", "audit_log", "unknown_directories", and "origin" when the
	// database id file is missing (the checkpoints' origin is then not
	// compared). The CLI adds "outboxes" (their state is index rows).
	Unchecked []string `json:"unchecked"`
	// Tails are the anchors whose newest segment ended, before the end of
	// the file, in bytes that do not read as the next record, with nothing
	// after them in the journal: a write in progress, what a crash left for
	// recovery, or damage to the last records. Not findings.
	Tails []FileTail `json:"tails"`
}

// recheckDelay is how long an anchor found damaged waits before it is
// read again.
const recheckDelay = 50 * time.Millisecond

// testBeforeRecheck, set by tests only, runs before the second read of
// anchors found damaged.
var testBeforeRecheck func()

// fileAnchorResult is one read of an anchor's files.
type fileAnchorResult struct {
	findings []Finding
	last     uint64
	roots    map[uint64]segment.Hash
	tail     *FileTail
	bytes    int64
	err      error
}

// verifyFiles is Verify for a read-only open without the index.
func (db *DB) verifyFiles(ctx context.Context, opts VerifyOptions) (VerifyReport, error) {
	if err := db.beginFiles(); err != nil {
		return VerifyReport{}, err
	}
	defer db.endRead()
	if err := proof.CheckVerifierKeys(opts.VerifierKeys...); err != nil {
		return VerifyReport{}, fmt.Errorf("verify: %w", err)
	}
	v := &verifier{db: db, opts: opts, parent: ctx, files: true}
	v.ctx, v.cancel = context.WithCancel(ctx)
	defer v.cancel()
	if opts.From != nil {
		if err := opts.From.Validate(); err != nil {
			return VerifyReport{}, fmt.Errorf("checkpoint to verify from: %w", err)
		}
		if want := proof.CheckpointOrigin(db.id); db.id != "" && opts.From.Origin != want {
			return VerifyReport{}, errs.New(errs.CodeInvalidInput, "checkpoint to verify from is of %q, this database is %q", opts.From.Origin, want)
		}
	}
	// NB: the stored checkpoints before the logs: each names records made
	// durable before its file was written, which the files read after it
	// hold (the journal, or the segments a settle wrote them to).
	var err error
	if v.stored, err = db.Checkpoints(v.ctx); err != nil {
		return VerifyReport{}, err
	}
	jv, err := db.readJournal(v.ctx)
	if err != nil {
		return VerifyReport{}, err
	}
	ids, err := db.fileAnchorIDs(v.ctx, jv)
	if err != nil {
		return VerifyReport{}, err
	}
	v.known = make(map[string]bool, len(ids))
	for _, id := range ids {
		v.known[id] = true
	}
	want := ids
	if len(opts.Anchors) > 0 {
		v.restricted, want = true, nil
		for _, id := range opts.Anchors {
			if err := segment.ValidateAnchorID(id); err != nil {
				return VerifyReport{}, err
			}
			if !v.known[id] {
				return VerifyReport{}, errs.New(errs.CodeDependencyMissing, "anchor %q is not in the database's files", id).At(id, 0, "", 0)
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
		v.jobs = append(v.jobs, c)
		v.byID[id] = c
	}
	v.planCheckpointRoots()
	for _, c := range v.jobs {
		c.from = nil // every anchor is read in full; From's roots are compared like a stored checkpoint's
	}
	stopProgress := v.startProgress()
	results := v.readAnchorFiles(v.jobs, jv)
	// Read again, a moment later, what the first read found damaged.
	var again []*anchorCheck
	for i, c := range v.jobs {
		if len(results[i].findings) > 0 {
			again = append(again, c)
		}
	}
	bad := jv.bad
	if (len(again) > 0 || len(bad) > 0) && !v.halted() {
		select {
		case <-v.ctx.Done():
		case <-time.After(recheckDelay):
		}
		if testBeforeRecheck != nil {
			testBeforeRecheck()
		}
		jv2, err := db.readJournal(v.ctx)
		if err != nil {
			stopProgress()
			return v.result(), err
		}
		bad = sameBlocks(bad, jv2.bad)
		second := v.readAnchorFiles(again, jv2)
		for i, c := range again {
			results[slices.Index(v.jobs, c)] = second[i]
		}
	}
	var tails []FileTail
	for i, c := range v.jobs {
		r := results[i]
		if r.err != nil && !v.halted() {
			v.fail(r.err)
		}
		for _, f := range r.findings {
			v.report(f)
		}
		c.last, c.roots, c.complete = r.last, r.roots, r.err == nil && !v.halted()
		v.records.Add(r.last)
		v.bytes.Add(r.bytes)
		if r.tail != nil {
			tails = append(tails, *r.tail)
		}
	}
	for _, f := range bad {
		v.report(f)
	}
	if !v.halted() {
		v.guard(v.foreignJournalEntries)
	}
	if !v.halted() {
		v.guard(v.checkCheckpoints)
	}
	stopProgress()
	v.mu.Lock()
	ioErr := v.ioErr
	v.mu.Unlock()
	if perr := ctx.Err(); perr != nil && ioErr == nil {
		ioErr = perr
	}
	rep := v.result()
	unchecked := []string{"index", "snapshots", "audit_log", "unknown_directories"}
	if db.id == "" {
		unchecked = append(unchecked, "origin")
	}
	if tails == nil {
		tails = []FileTail{}
	}
	rep.Files = &FilesCheck{Why: db.ro.why, Unchecked: unchecked, Tails: tails}
	return rep, ioErr
}

// readAnchorFiles reads the files of each anchor, Threads at a time.
func (v *verifier) readAnchorFiles(jobs []*anchorCheck, jv *journalView) []fileAnchorResult {
	out := make([]fileAnchorResult, len(jobs))
	threads := v.opts.Threads
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	next := make(chan int, len(jobs))
	for i := range jobs {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range min(threads, max(len(jobs), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if v.halted() {
					continue
				}
				out[i] = v.readAnchor(jobs[i], jv)
				v.anchorsDone.Add(1)
			}
		}()
	}
	wg.Wait()
	return out
}

// readAnchor reads one anchor's files, its tree's roots at the sizes the
// checkpoints name along.
func (v *verifier) readAnchor(c *anchorCheck, jv *journalView) (r fileAnchorResult) {
	defer func() {
		if p := recover(); p != nil {
			r.err = errs.New(errs.CodeWriteFailed, "verify: internal error: %v", p)
		}
	}()
	w := v.db.newFileWalk(c.id, jv)
	r.roots = make(map[uint64]segment.Hash)
	var tree proof.Stack
	note := func() {
		if _, ok := slices.BinarySearch(c.wanted, tree.Size()); ok {
			r.roots[tree.Size()] = tree.Root()
		}
	}
	note()
	w.finding = func(f Finding) { r.findings = append(r.findings, f) }
	w.visit = func(e fileEntry) error {
		if v.halted() {
			return errStopWalk
		}
		tree.Append(segment.LeafHash(e.hash), nil)
		note()
		return nil
	}
	r.err = w.run(v.ctx)
	r.last, r.tail, r.bytes = w.size, w.tail, w.bytes
	return r
}

// sameBlocks keeps the findings of a that b makes at the same place.
func sameBlocks(a, b []Finding) []Finding {
	var out []Finding
	for _, f := range a {
		if slices.ContainsFunc(b, func(g Finding) bool { return g.File == f.File && g.Offset == f.Offset }) {
			out = append(out, f)
		}
	}
	return out
}
