package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/merge"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// withTailRuns runs f with the fast rebuild's tail written in runs of at
// most n bytes: one run per record or so, each ingested on its own.
func withTailRuns(t *testing.T, n int, f func()) {
	t.Helper()
	old := tailRunBytes
	tailRunBytes = n
	defer func() { tailRunBytes = old }()
	f()
}

func TestRebuildFromSnapshotMatchesFullReplay(t *testing.T) {
	for _, runs := range []int{tailRunBytes, 200} {
		t.Run(fmt.Sprintf("tail-run=%d", runs), func(t *testing.T) {
			withTailRuns(t, runs, func() { testRebuildFromSnapshotMatchesFullReplay(t) })
		})
	}
}

func testRebuildFromSnapshotMatchesFullReplay(t *testing.T) {
	ctx := context.Background()
	for _, truncate := range []bool{false, true} {
		t.Run(fmt.Sprintf("truncate=%v", truncate), func(t *testing.T) {
			fs := vfs.NewMem()
			db, want := compactFixture(t, fs)
			if truncate {
				for i := 0; i < 2; i++ {
					if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
						t.Fatal(err)
					}
					_, _ = db.Put(ctx, "a0", []byte(fmt.Sprintf("x%d", i)), []byte("between"))
					want[fmt.Sprintf("x%d", i)] = "between"
				}
			} else if _, err := db.CreateSnapshot(ctx, ""); err != nil {
				t.Fatal(err)
			}
			// A tail after the snapshot, with a delete and idempotency keys.
			for i := 0; i < 40; i++ {
				k := fmt.Sprintf("k%03d", i%60)
				if i%9 == 0 {
					if _, err := db.Delete(ctx, "a1", []byte(k)); err != nil {
						t.Fatal(err)
					}
					delete(want, k)
					continue
				}
				e := Entry{Anchor: fmt.Sprintf("a%d", i%4), Type: "put", Key: []byte(k), Value: []byte(fmt.Sprint("tail", i)),
					IdempotencyKey: []byte(fmt.Sprint("t", i))}
				if _, err := db.Append(ctx, e); err != nil {
					t.Fatal(err)
				}
				want[k] = fmt.Sprint("tail", i)
			}
			rootBefore, n, err := db.MergedRoot(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			heads := map[string]AnchorInfo{}
			for info, err := range db.Anchors(ctx) {
				if err != nil {
					t.Fatal(err)
				}
				heads[info.ID] = info
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			opts := fixtureOptions(fs)
			plan, err := RebuildIndexWith(ctx, "db", opts, RebuildOptions{Apply: true, FromSnapshot: true})
			if err != nil {
				t.Fatal(err)
			}
			fast := true
			for _, ev := range plan.Report.Events {
				if ev.Kind == EventFastRebuildAbandoned || ev.Kind == EventDamaged {
					fast = false
					t.Logf("event: %v", ev)
				}
			}
			if !fast {
				t.Fatal("the fast path was abandoned on a clean database")
			}
			db, err = Open("db", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			checkState(t, db, want)
			// The index it wrote (the state at the frontier without the
			// history below it) verifies.
			if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
				t.Fatalf("verify after the rebuild: %v %+v", err, rep.Failures)
			}
			rootAfter, n2, err := db.MergedRoot(ctx, nil)
			if err != nil || rootAfter != rootBefore || n2 != n {
				t.Fatalf("merged root after the rebuild differs: %v (%d vs %d)", err, n2, n)
			}
			for info, err := range db.Anchors(ctx) {
				if err != nil {
					t.Fatal(err)
				}
				if h := heads[info.ID]; h.Records != info.Records || h.HeadHash != info.HeadHash || h.LastCounter != info.LastCounter || h.Segments != info.Segments {
					t.Fatalf("anchor %s: before %+v, after %+v", info.ID, h, info)
				}
			}
			// The state at a frontier older than the snapshot's is not in
			// the rebuilt index: refused, not answered wrongly.
			if _, err := db.GetAt(ctx, []byte("k001"), merge.Frontier{"a0": 1}); !errors.Is(err, ErrDependencyMissing) {
				t.Fatalf("GetAt below the rebuilt frontier: %v, want STATE_003", err)
			}
			// Idempotency keys survive; writes continue the chains.
			r, err := db.Append(ctx, Entry{Anchor: "a1", Type: "put", Key: []byte("k001"), Value: []byte("tail1"), IdempotencyKey: []byte("t1")})
			if err != nil || !r.Duplicate {
				t.Fatalf("idempotent retry after the rebuild: %+v %v", r, err)
			}
			if _, err := db.Put(ctx, "a2", []byte("new"), []byte("x")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestRebuildFromSnapshotFallsBack(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, want := compactFixture(t, fs)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// No snapshot: a full replay does it.
	plan, err := RebuildIndexWith(ctx, "db", fixtureOptions(fs), RebuildOptions{Apply: true, FromSnapshot: true})
	if err != nil {
		t.Fatal(err)
	}
	abandoned := false
	for _, ev := range plan.Report.Events {
		abandoned = abandoned || ev.Kind == EventFastRebuildAbandoned
	}
	if !abandoned {
		t.Fatalf("no snapshot, yet the fast path ran: %+v", plan.Report)
	}
	db, err = Open("db", fixtureOptions(fs))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	checkState(t, db, want)
}

// TestRebuildAfterTruncationKeepsWhatStubsHold is the regression test for a
// rebuild after compaction truncated the logs: the rebuilt index lost the
// frames of records kept as their key's newest version ('r' rows, so verify
// reported INT_004), the idempotency keys of removed records (so a retry was
// appended a second time), and a delete below the cut (so an older put of
// its key, above another anchor's cut, came back). Stubs now carry all three.
func TestRebuildAfterTruncationKeepsWhatStubsHold(t *testing.T) {
	ctx := context.Background()
	for _, fast := range []bool{false, true} {
		t.Run(fmt.Sprintf("from_snapshot=%v", fast), func(t *testing.T) {
			fs := vfs.NewMem()
			opts := Options{FS: fs, SegmentSize: 1024, InlineValueMax: 64}
			db, err := Open("db", opts)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{}
			type retry struct {
				e Entry
				r Receipt
			}
			var retries []retry
			// "old" is put by a1 early (its segment stays: a1 writes little
			// and never seals) and deleted by a0 later, in a segment of a0's
			// that compaction removes.
			r, err := db.Put(ctx, "a1", []byte("old"), []byte("resurrected?"))
			if err != nil {
				t.Fatal(err)
			}
			_ = r
			for i := 0; i < 120; i++ {
				e := Entry{Anchor: "a0", Type: "put", Key: []byte(fmt.Sprintf("k%03d", i%40)),
					Value: []byte(fmt.Sprint("v", i)), IdempotencyKey: []byte(fmt.Sprint("idem-", i))}
				if i == 3 {
					e = Entry{Anchor: "a0", Type: "delete", Key: []byte("old"), IdempotencyKey: []byte("idem-del")}
				} else {
					want[string(e.Key)] = string(e.Value)
				}
				r, err := db.Append(ctx, e)
				if err != nil {
					t.Fatal(err)
				}
				if i%10 == 3 {
					retries = append(retries, retry{e, r})
				}
			}
			for i := 0; i < 2; i++ {
				if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
					t.Fatal(err)
				}
				e := Entry{Anchor: "a0", Type: "put", Key: []byte(fmt.Sprint("between", i)), Value: []byte("x")}
				if _, err := db.Append(ctx, e); err != nil {
					t.Fatal(err)
				}
				want[string(e.Key)] = "x"
			}
			if first, _ := db.firstPresent("a0"); first < 10 {
				t.Fatalf("compaction removed nothing of a0 (first present seq %d)", first)
			}
			check := func(stage string) {
				t.Helper()
				checkState(t, db, want)
				rep, err := db.Verify(ctx, VerifyOptions{})
				if err != nil || !rep.OK {
					t.Fatalf("%s: verify: %v %+v", stage, err, rep.Failures)
				}
				for _, rt := range retries {
					got, err := db.Append(ctx, rt.e)
					if err != nil || !got.Duplicate || got.Seq != rt.r.Seq || got.Hash != rt.r.Hash || got.Counter != rt.r.Counter {
						t.Fatalf("%s: retry of %s: %+v %v, want the receipt %+v", stage, rt.e.IdempotencyKey, got, err, rt.r)
					}
				}
			}
			check("before the rebuild")
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if fast {
				if _, err := RebuildIndexWith(ctx, "db", opts, RebuildOptions{Apply: true, FromSnapshot: true}); err != nil {
					t.Fatal(err)
				}
			} else if err := fs.RemoveAll("db/index"); err != nil {
				t.Fatal(err)
			}
			db, err = Open("db", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			for _, ev := range db.RecoveryReport().Events {
				if ev.Kind == EventDamaged || ev.Kind == EventFastRebuildAbandoned {
					t.Fatalf("rebuild: %v", ev)
				}
			}
			check("after the rebuild")
		})
	}
}

// A crash at any write of a rebuild from a snapshot — while its tables are
// written, between its ingestions, before it marks the index whole — leaves
// a database that opens (rebuilding again, by full replay) with the same
// state, and verifies.
func TestRebuildFromSnapshotCrashAtEveryWrite(t *testing.T) {
	withTailRuns(t, 200, func() {
		ctx := context.Background()
		mem := vfs.NewCrashableMem()
		want := snapshotWithTail(t, mem, 100)
		var mu sync.Mutex
		var clones []*vfs.MemFS
		var capture atomic.Bool
		rng := rand.New(rand.NewPCG(5, 6))
		inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
			// From the rebuild's first table on: Pebble's own Open is not
			// crash-tested on MemFS (see TestCompactCrashAtEveryWrite).
			if strings.Contains(op.Path, "rebuild-") {
				capture.Store(true)
			}
			if capture.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
				mu.Lock()
				clones = append(clones, testutil.CrashClone(mem, vfs.CrashCloneCfg{UnsyncedDataPercent: 30, RNG: rand.New(rand.NewPCG(rng.Uint64(), 1))}))
				mu.Unlock()
			}
			return nil
		})
		opts := fixtureOptions(errorfs.Wrap(linkGuard{mem, &mu}, inj))
		plan, err := RebuildIndexWith(ctx, "db", opts, RebuildOptions{Apply: true, FromSnapshot: true})
		capture.Store(false)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range plan.Report.Events {
			if ev.Kind == EventFastRebuildAbandoned {
				t.Fatalf("the fast path was abandoned: %v", ev)
			}
		}
		if len(clones) < 20 {
			t.Fatalf("only %d crash points: the rebuild's writes were not seen", len(clones))
		}
		t.Logf("%d crash points", len(clones))
		for i, c := range clones {
			if i%testutil.RaceStride(8) != 0 && i != len(clones)-1 {
				continue
			}
			checkAfterRebuild(t, c, want, fmt.Sprintf("crash point %d", i))
		}
	})
}

// linkGuard keeps CrashClone out of MemFS.Link. Pebble v2.1.7's Link takes
// the MemFS clone lock for reading twice, so a clone taken between the two
// (by a compaction's write while an ingestion links a table) deadlocks.
type linkGuard struct {
	vfs.FS
	mu *sync.Mutex // also held around every CrashClone
}

func (g linkGuard) Link(oldname, newname string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.FS.Link(oldname, newname)
}

// deferredFixture is a database rebuilt from a snapshot, open, with its
// deferred 'k' rows (the snapshot's state, without locations) by anchor.
func deferredFixture(t *testing.T) (*DB, map[string][][2][]byte) {
	t.Helper()
	ctx := context.Background()
	fs := vfs.NewMem()
	snapshotWithTail(t, fs, 0) // the tail writes keys the snapshot holds
	opts := fixtureOptions(fs)
	if _, err := RebuildIndexWith(ctx, "db", opts, RebuildOptions{Apply: true, FromSnapshot: true}); err != nil {
		t.Fatal(err)
	}
	db := mustOpen(t, fs, opts)
	t.Cleanup(func() { _ = db.Close() })
	rows := map[string][][2][]byte{}
	it, err := db.index.NewIter(&pebble.IterOptions{LowerBound: []byte{schema.TagKey}, UpperBound: []byte{schema.TagKey + 1}})
	if err != nil {
		t.Fatal(err)
	}
	for it.First(); it.Valid(); it.Next() {
		if schema.KindOf(it.Value()) != schema.Deferred {
			continue
		}
		_, _, anchor, err := schema.ParseVersionKey(it.Key())
		if err != nil {
			t.Fatal(err)
		}
		rows[anchor] = append(rows[anchor], [2][]byte{slices.Clone(it.Key()), slices.Clone(it.Value())})
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("deferred rows of %d anchors, want 3", len(rows))
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("the rebuilt index does not verify: %v %+v", err, rep.Failures)
	}
	return db, rows
}

// Verify checks the rows a rebuild from a snapshot wrote without locations
// against the records their 's' rows point to, anchor by anchor.
func TestVerifyDeferredRows(t *testing.T) {
	t.Run("wrong hash, in every anchor", func(t *testing.T) {
		db, rows := deferredFixture(t)
		seqs := map[string]uint64{}
		for _, a := range []string{"a0", "a1", "a2"} {
			// The middle row of each anchor: the rows are checked in
			// record order, so a reader kept from the last anchor or row
			// must not hide it.
			r := rows[a][len(rows[a])/2]
			ve, err := schema.DecodeVersion(r[1])
			if err != nil {
				t.Fatal(err)
			}
			ve.Hash[0] ^= 1
			setRow(t, db, r[0], ve.Append(nil))
			seqs[a] = ve.Seq
		}
		for a, seq := range seqs {
			wantFinding(t, db, errs.CodeIndexMismatch, a, seq, "it says hash")
		}
	})
	t.Run("wrong value", func(t *testing.T) {
		db, rows := deferredFixture(t)
		for _, r := range rows["a1"] {
			ve, _ := schema.DecodeVersion(r[1])
			if !ve.Inline || len(ve.Value) == 0 {
				continue
			}
			ve.Value = append(slices.Clone(ve.Value[:len(ve.Value)-1]), ve.Value[len(ve.Value)-1]^1)
			setRow(t, db, r[0], ve.Append(nil))
			wantFinding(t, db, errs.CodeIndexMismatch, "a1", ve.Seq, "does not say what the record says")
			return
		}
		t.Fatal("no inline deferred row in a1")
	})
	t.Run("beyond the rebuilt range", func(t *testing.T) {
		db, rows := deferredFixture(t)
		r := rows["a2"][0]
		ve, _ := schema.DecodeVersion(r[1])
		ve.Seq = db.histFrom["a2"] + 1
		setRow(t, db, r[0], ve.Append(nil))
		wantFinding(t, db, errs.CodeIndexMismatch, "a2", ve.Seq, "no rebuild from a snapshot covers it")
	})
}

// A rebuild from a snapshot that gives up in its main loop (here: a damaged
// record in the first anchor's tail) must stop and wait for its goroutines
// before it removes its directory and closes the snapshot: the one writing
// the state's table kept reading the snapshot and writing into the removed
// directory, and on MemFS crashed reading the closed file.
func TestAbandonedRebuildLeavesNothingRunning(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	db := mustOpen(t, mem, Options{FS: mem})
	var entries []Entry
	for i := 0; i < 30000; i++ {
		entries = append(entries, Entry{Anchor: "b", Type: "put", Key: []byte(fmt.Sprintf("key-%07d", i)), Value: []byte(strings.Repeat("v", 60))})
		if len(entries) == 1000 {
			if _, err := db.AppendBatch(ctx, entries); err != nil {
				t.Fatal(err)
			}
			entries = entries[:0]
		}
	}
	if _, err := db.CreateSnapshot(ctx, ""); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if _, err := db.Put(ctx, "a", []byte(fmt.Sprintf("k%d", i)), []byte(fmt.Sprintf("value-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	flipValueByte(t, mem, "a", "value-2")

	var mu sync.Mutex
	removed := false
	var after []string
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !strings.Contains(op.Path, "rebuild-") {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if op.Kind == errorfs.OpRemoveAll {
			removed = true
		} else if removed {
			after = append(after, fmt.Sprintf("%v %s", op.Kind, op.Path))
		}
		return nil
	})
	opts := Options{FS: errorfs.Wrap(testutil.LockOrdered(mem), inj)}
	plan, err := RebuildIndexWith(ctx, "db", opts, RebuildOptions{Apply: true, FromSnapshot: true})
	if err != nil {
		t.Fatal(err)
	}
	abandoned := false
	for _, ev := range plan.Report.Events {
		abandoned = abandoned || ev.Kind == EventFastRebuildAbandoned
	}
	if !abandoned {
		t.Fatalf("the fast path was not abandoned: %+v", plan.Report)
	}
	// Give a straggler time to show: open and read the database.
	db = mustOpen(t, mem, Options{FS: mem})
	if _, err := db.Get(ctx, []byte("key-0029999")); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !removed {
		t.Fatal("the rebuild's directory was never removed")
	}
	if len(after) > 0 {
		t.Fatalf("%d operations on the rebuild's directory after it was removed, the first %q", len(after), after[0])
	}
}

// Error injection into a rebuild from a snapshot: the i-th operation on the
// rebuild's own tables (create, write, sync, close, the ingestion's link)
// fails, for i = 0, 1, … until a rebuild meets no failure. Each failed
// rebuild must return a coded error, or fall back and succeed; a plain open
// afterwards must give the same state, verify, and leave no table behind.
func TestRebuildFromSnapshotErrorInjection(t *testing.T) {
	withTailRuns(t, 200, func() {
		ctx := context.Background()
		pristine := vfs.NewMem()
		want := snapshotWithTail(t, pristine, 100)
		for i := 0; ; i += testutil.RaceStride(6) {
			mem := vfs.NewMem()
			if err := testutil.CopyTree(pristine, "", mem, ""); err != nil {
				t.Fatal(err)
			}
			var n atomic.Int64
			var fired atomic.Bool
			inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
				if !strings.Contains(op.Path, "rebuild-") || op.Kind == errorfs.OpRemoveAll {
					return nil
				}
				if n.Add(1)-1 == int64(i) {
					fired.Store(true)
					return errorfs.ErrInjected
				}
				return nil
			})
			opts := fixtureOptions(errorfs.Wrap(testutil.LockOrdered(mem), inj))
			_, err := RebuildIndexWith(ctx, "db", opts, RebuildOptions{Apply: true, FromSnapshot: true})
			if err != nil && errs.CodeOf(err) == "" {
				t.Fatalf("op %d: an uncoded error: %v", i, err)
			}
			if !fired.Load() {
				if err != nil {
					t.Fatalf("no failure injected, yet: %v", err)
				}
				t.Logf("%d operations on the rebuild's tables", i)
				return
			}
			checkAfterRebuild(t, mem, want, fmt.Sprintf("op %d", i))
		}
	})
}

// snapshotWithTail writes compactFixture to fs, snapshots it, puts a tail of
// 20 keys from k<first> on after it, closes it, and returns the state.
func snapshotWithTail(t *testing.T, fs vfs.FS, first int) map[string]string {
	t.Helper()
	ctx := context.Background()
	db, want := compactFixture(t, fs)
	if _, err := db.CreateSnapshot(ctx, ""); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		k := fmt.Sprintf("k%03d", first+i)
		if _, err := db.Put(ctx, fmt.Sprintf("a%d", i%3), []byte(k), []byte("tail")); err != nil {
			t.Fatal(err)
		}
		want[k] = "tail"
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return want
}

// checkAfterRebuild opens the database on fs as it is after an interrupted
// or failed rebuild, and requires no damage, the state want, a clean verify
// and nothing left in db/tmp.
func checkAfterRebuild(t *testing.T, fs vfs.FS, want map[string]string, what string) {
	t.Helper()
	db, err := Open("db", fixtureOptions(fs))
	if err != nil {
		t.Fatalf("%s: open: %v", what, err)
	}
	for _, ev := range db.RecoveryReport().Events {
		if ev.Kind == EventDamaged {
			t.Fatalf("%s: %v", what, ev)
		}
	}
	checkState(t, db, want)
	if rep, err := db.Verify(context.Background(), VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("%s: verify: %v %+v", what, err, rep.Failures)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if left, _ := fs.List("db/tmp"); len(left) > 0 {
		t.Fatalf("%s: %v left in db/tmp", what, left)
	}
}
