package engine

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/merge"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// truncatedDB returns a database whose anchor "a" (600 records over seven
// keys, so a removed segment keeps a few of its records and loses the
// rest) and "b" (60 records, a key each) a truncating compaction has cut,
// with the merged root, the positions and the records before it.
func truncatedDB(t *testing.T) (db *DB, rootBefore Hash, sizeBefore uint64, before []Positioned) {
	t.Helper()
	ctx := context.Background()
	fs := vfs.NewMem()
	db = mustOpen(t, fs, Options{SegmentSize: 4096})
	t.Cleanup(func() { _ = db.Close() })
	for i := 0; i < 600; i++ {
		if _, err := db.Put(ctx, "a", []byte(fmt.Sprintf("k%d", i%7)), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 {
			if _, err := db.Put(ctx, "b", []byte(fmt.Sprintf("b%03d", i)), []byte(fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A snapshot first, below which the next run may truncate.
	if _, err := db.Compact(ctx, truncatePolicy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "b", []byte("last"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	var err error
	if rootBefore, sizeBefore, err = db.MergedRoot(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for p, err := range db.Merged(ctx, MergedOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, p)
	}
	res, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true})
	if err != nil || res.RemovedBytes == 0 {
		t.Fatalf("compact: %v %s", err, res.Plan)
	}
	// What it freed is told net of the stubs it wrote in the segments' place.
	var stubs int64
	for _, a := range []string{"a", "b"} {
		dir := segmentAnchorDir(fs, "db", a)
		names, _ := fs.List(dir)
		for _, n := range names {
			if strings.HasSuffix(n, ".hashes") {
				st, err := fs.Stat(fs.PathJoin(dir, n))
				if err != nil {
					t.Fatal(err)
				}
				stubs += st.Size()
			}
		}
	}
	if stubs == 0 || res.StubBytes != stubs || res.NetBytes() != res.RemovedBytes-stubs {
		t.Fatalf("compaction: %d bytes removed, %d of stubs written (the files hold %d), net %d", res.RemovedBytes, res.StubBytes, stubs, res.NetBytes())
	}
	if first, _ := db.firstPresent("a"); first < 100 {
		t.Fatalf("anchor a cut at %d", first-1)
	}
	return db, rootBefore, sizeBefore, before
}

// goneRunRE reads the run a STATE_003 of a removed run names.
var goneRunRE = regexp.MustCompile(`^(?:record (\d+)|records (\d+)\.\.(\d+)) of anchor`)

// checkLogCovers reads Log(anchor, from, to), going on after each error,
// and checks that it covers every seq from..to exactly once, in order: a
// record (one below first must be a copy the compaction kept, as Record
// returns it) or a run of gone records, refused with STATE_003 at the run's
// first seq, naming it and first, the seq the log is held whole from. It
// returns how many kept records and gone runs it saw.
func checkLogCovers(t *testing.T, db *DB, anchor string, from, to, first uint64) (kept, runs int) {
	t.Helper()
	ctx := context.Background()
	next := from
	for rec, err := range db.Log(ctx, anchor, from, to) {
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code != ErrDependencyMissing.Code || e.Anchor != anchor || e.Seq != next {
				t.Fatalf("log %s [%d, %d]: %v at seq %d, want STATE_003 at %d", anchor, from, to, err, e.Seq, next)
			}
			m := goneRunRE.FindStringSubmatch(e.Message)
			if m == nil || !strings.Contains(e.Message, fmt.Sprintf("held whole from seq %d", first)) {
				t.Fatalf("log %s: STATE_003 %q does not name its run and seq %d", anchor, e.Message, first)
			}
			lo, hi := m[1], m[1]
			if lo == "" {
				lo, hi = m[2], m[3]
			}
			l, _ := strconv.ParseUint(lo, 10, 64)
			h, _ := strconv.ParseUint(hi, 10, 64)
			if l != next || h < l || h >= first {
				t.Fatalf("log %s: a gone run %d..%d where seq %d is due (held from %d)", anchor, l, h, next, first)
			}
			next = h + 1
			runs++
			continue
		}
		if rec.Seq != next || rec.Anchor != anchor {
			t.Fatalf("log %s [%d, %d]: %s seq %d where %d is due", anchor, from, to, rec.Anchor, rec.Seq, next)
		}
		if rec.Seq < first {
			kept++
			if r, err := db.Record(ctx, anchor, rec.Seq); err != nil || r.Hash != rec.Hash || r.ComputeHash() != rec.Hash {
				t.Fatalf("log %s seq %d below the cut: a record Record does not give (%v)", anchor, rec.Seq, err)
			}
		}
		next++
	}
	if next != to+1 {
		t.Fatalf("log %s [%d, %d] ended at seq %d", anchor, from, to, next-1)
	}
	return kept, runs
}

// After a truncating compaction Log returns the records the compaction kept
// and refuses, in place, each run of those it did not with STATE_003 naming
// the run and the first seq still held whole: it printed nothing and ended
// cleanly when asked for a range below the cut. An anchor the database
// does not hold is STATE_003 too, never an empty log.
func TestLogAfterTruncationKeptRecordsAndRefusals(t *testing.T) {
	ctx := context.Background()
	db, _, _, _ := truncatedDB(t)
	first, err := db.firstPresent("a")
	if err != nil {
		t.Fatal(err)
	}
	kept, runs := checkLogCovers(t, db, "a", 1, 30, first)
	if kept == 0 || runs == 0 {
		t.Fatalf("log a 1..30 below the cut at %d: %d kept records, %d gone runs; the fixture should give both", first-1, kept, runs)
	}
	checkLogCovers(t, db, "a", 1, 600, first)
	checkLogCovers(t, db, "a", first-3, first+3, first)
	// Past the head: nothing, and no error (records may come).
	for _, err := range db.Log(ctx, "a", 601, 0) {
		t.Fatalf("log past the head: %v", err)
	}
	n := 0
	for _, err := range db.Log(ctx, "nosuch", 1, 0) {
		if !errors.Is(err, ErrDependencyMissing) {
			t.Fatalf("log of an unknown anchor: %v, want STATE_003", err)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("log of an unknown anchor yielded %d errors, want one STATE_003", n)
	}
}

// The merged root commits to every record, those a compaction removed
// included (their hashes and counters stay): the same before and after a
// truncation, at the current frontier and at one inside the truncated log,
// where it used to be the root of the records past the cut (an empty root
// with exit 0 for a frontier wholly inside). With one anchor it is the
// anchor's tree root at every size.
func TestMergedRootCoversTruncatedRecords(t *testing.T) {
	ctx := context.Background()
	db, rootBefore, sizeBefore, before := truncatedDB(t)
	root, size, err := db.MergedRoot(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if root != rootBefore || size != sizeBefore {
		t.Fatalf("merged root after the truncation %s over %d records, before it %s over %d", root, size, rootBefore, sizeBefore)
	}
	// A frontier inside the truncated log: the root of that prefix of the
	// merged order, computed from the records before the compaction.
	f := merge.Frontier{"a": 50, "b": 5}
	b := merge.NewRootBuilder()
	for _, p := range before {
		if f.Contains(p.Anchor, p.Seq) {
			b.Append(p.Hash)
		}
	}
	root, size, err = db.MergedRoot(ctx, f)
	if err != nil || root != b.Root() || size != 55 {
		t.Fatalf("merged root at %v inside the cut: %s over %d (%v), want %s over 55", f, root, size, err, b.Root())
	}
	for _, n := range []uint64{1, 50, 300, 600} {
		root, _, err := db.MergedRoot(ctx, merge.Frontier{"a": n})
		if err != nil {
			t.Fatal(err)
		}
		want, _, err := db.AnchorRoot(ctx, "a", n)
		if err != nil || root != want {
			t.Fatalf("merged root of anchor a alone at %d: %s, its tree root %s (%v)", n, root, want, err)
		}
	}
}

// Merged after a truncation: every position as before it, the kept records
// yielded as they were, and each run of gone positions refused in place
// with STATE_003 at its first record; the records held whole come all.
func TestMergedAfterTruncationKeepsPositions(t *testing.T) {
	ctx := context.Background()
	db, _, _, before := truncatedDB(t)
	byPos := map[uint64]Positioned{}
	for _, p := range before {
		byPos[p.Pos] = p
	}
	var next uint64 = 1
	var gone, got int
	var pending *Error
	for p, err := range db.Merged(ctx, MergedOptions{}) {
		if err != nil {
			if !errors.As(err, &pending) || pending.Code != ErrDependencyMissing.Code {
				t.Fatalf("merged: %v, want STATE_003 for a gone run", err)
			}
			w := byPos[next]
			if pending.Anchor != w.Anchor || pending.Seq != w.Seq {
				t.Fatalf("a gone run reported at %s seq %d; position %d is %s seq %d", pending.Anchor, pending.Seq, next, w.Anchor, w.Seq)
			}
			gone++
			continue
		}
		if pending != nil {
			next, pending = p.Pos, nil // the run ends before this position
		}
		w := byPos[p.Pos]
		if p.Pos != next || p.Hash != w.Hash || p.Anchor != w.Anchor || p.Seq != w.Seq {
			t.Fatalf("position %d: %s seq %d, before the compaction %s seq %d (next due %d)", p.Pos, p.Anchor, p.Seq, w.Anchor, w.Seq, next)
		}
		next++
		got++
	}
	if gone == 0 || next != uint64(len(before))+1 {
		t.Fatalf("merged: %d records, %d gone runs, ended at position %d of %d", got, gone, next-1, len(before))
	}
	// A view from a position past every gone run is whole.
	first, _ := db.firstPresent("a")
	var from uint64
	for _, p := range before {
		if p.Anchor == "a" && p.Seq == first {
			from = p.Pos
		}
	}
	for _, err := range db.Merged(ctx, MergedOptions{From: from}) {
		if err != nil {
			t.Fatalf("merged from position %d, past the cut: %v", from, err)
		}
	}
}
