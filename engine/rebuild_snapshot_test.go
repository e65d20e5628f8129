package engine

// Rebuilds of the index from a snapshot (rebuild-index --from-snapshot):
// which snapshot the rebuild may start from, when it gives way to a full
// replay, and what later appends and truncations make of the index it builds.

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A snapshot holds no deletes. When a tail record sorts before the last
// record inside the snapshot's frontier (caller counters, CONTRACT §1), a
// delete there may be the key's last version in merged order: the rebuild
// from the snapshot gives way to a full replay, which gives the same Get
// answers.
func TestSnapshotRebuildAbandonedWhenTheTailSortsFirst(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	opts := Options{FS: fs, SegmentSize: 4096, InlineValueMax: 64}
	db := mustOpen(t, fs, opts)
	if _, err := db.Put(ctx, "b", []byte("k"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Append(ctx, Entry{Anchor: "b", Type: "delete", Key: []byte("k"), Counter: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateSnapshot(ctx, ""); err != nil {
		t.Fatal(err)
	}
	// The tail: a put on another anchor with a caller counter below the
	// delete's. It sorts before the delete in merged order.
	if _, err := db.Append(ctx, Entry{Anchor: "c", Type: "put", Key: []byte("k"), Value: []byte("y"), Counter: 500}); err != nil {
		t.Fatal(err)
	}
	if v, err := db.Get(ctx, []byte("k")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("before the rebuild: Get(k) = %q, %v; want not found", v.Value, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if kinds := rebuildFromSnapshot(t, opts); !kinds[EventFastRebuildAbandoned] {
		t.Fatalf("the fast path was taken: %v", kinds)
	}
	db = mustOpen(t, fs, opts)
	defer db.Close()
	if v, err := db.Get(ctx, []byte("k")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after rebuild-index --from-snapshot: Get(k) = %q, %v; a full replay says not found (the delete, counter 1000000, is last in merged order)", v.Value, err)
	}
}

// After a rebuild from a snapshot the index has no row for a key deleted
// below the snapshot's frontier. A truncation decides what to keep from the
// segment's own records, so the delete is kept in its stub, and a full
// rebuild afterwards does not bring back the older put (CONTRACT §3: the
// index is a projection of the files).
func TestTruncationAfterSnapshotRebuildKeepsADelete(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	opts := Options{FS: fs, SegmentSize: 4096, InlineValueMax: 64}
	db := mustOpen(t, fs, opts)
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Delete(ctx, "b", []byte("k")); err != nil {
		t.Fatal(err)
	}
	// b's delete ends up in a sealed segment.
	fillAnchor(t, db, "b", 200, "x")
	// S1.
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if kinds := rebuildFromSnapshot(t, opts); !kinds[EventStateFromSnapshot] {
		t.Fatalf("fast path not taken: %v", kinds)
	}
	db = mustOpen(t, fs, opts)
	fillAnchor(t, db, "b", 5, "y")
	res, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}) // S2, truncate b below S1
	if err != nil {
		t.Fatal(err)
	}
	if res.RemovedBytes == 0 {
		t.Fatalf("nothing truncated: %s", res.Plan)
	}
	if v, err := db.Get(ctx, []byte("k")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after truncation: Get(k) = %q, %v; want not found", v.Value, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := RebuildIndex(ctx, "db", opts, true); err != nil {
		t.Fatal(err)
	}
	db, err = Open("db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if v, err := db.Get(ctx, []byte("k")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after a full rebuild-index: Get(k) = %q, %v; the key was deleted (b seq 1 is its last version)", v.Value, err)
	}
}

// A well-formed snapshot whose frontier names heads the log does not have is
// corrupt here (INT_003, CONTRACT §6): the rebuild from a snapshot skips it,
// says so, and replays the log instead.
func TestSnapshotRebuildSkipsASnapshotOfAnotherLog(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	opts := Options{FS: fs, SegmentSize: 4096, InlineValueMax: 64}
	db := mustOpen(t, fs, opts)
	r, err := db.Put(ctx, "a", []byte("k"), []byte("real"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "a", []byte("j"), []byte("real-j")); err != nil {
		t.Fatal(err)
	}
	// A well-formed snapshot (every file hash right) of another history of
	// anchor "a": its head hash at seq 2 is not the log's.
	foreign := snapshot.Frontier{"a": {Seq: 2, Hash: segment.Hash{1, 2, 3}}}
	info, err := snapshot.Create(fs, db.SnapshotsDir(), snapshot.Meta{Frontier: foreign}, func(yield func(snapshot.Entry, error) bool) {
		yield(snapshot.Entry{Key: []byte("k"), Value: []byte("foreign"), Version: snapshot.Version{Anchor: "a", Seq: 1, Counter: r.Counter, Hash: r.Hash}}, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	audit := db.AuditPath()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The fast path takes only a snapshot the audit log records (an
	// unrecorded one is skipped with STATE_003 before its frontier is
	// looked at): a line for it, whose chain is unkeyed, gets it that far.
	if _, err := snapshot.Append(fs, audit, snapshot.AuditEntry{Action: string(snapshot.ActionCreateSnapshot),
		Added: []snapshot.AuditItem{snapshot.SnapshotItem(info)}}); err != nil {
		t.Fatal(err)
	}
	plan, err := RebuildIndexWith(ctx, "db", opts, RebuildOptions{Apply: true, FromSnapshot: true})
	if err != nil {
		t.Fatal(err)
	}
	skipped := false
	for _, ev := range plan.Report.Events {
		if ev.Kind == EventStateFromSnapshot {
			t.Fatalf("the index was built from the foreign snapshot: %v", plan.Report.Events)
		}
		skipped = skipped || ev.Kind == EventSnapshotSkipped && CodeOf(ev.Err) == errs.CodeSnapshotCorrupted
	}
	if !skipped {
		t.Fatalf("no INT_003 snapshot_skipped event: %v", plan.Report.Events)
	}
	db = mustOpen(t, fs, opts)
	defer db.Close()
	k, kerr := db.Get(ctx, []byte("k"))
	j, jerr := db.Get(ctx, []byte("j"))
	if kerr != nil || string(k.Value) != "real" || jerr != nil || string(j.Value) != "real-j" {
		t.Fatalf("after rebuild-index --from-snapshot with a snapshot whose frontier disagrees with the log: Get(k) = %q %v, Get(j) = %q %v; want \"real\", \"real-j\" (the snapshot should be skipped as INT_003)",
			k.Value, kerr, j.Value, jerr)
	}
}

// After a rebuild from a snapshot, an append that sorts before a delete
// inside the snapshot's frontier (a caller's counter) must not stand as the
// key's newest version: the rebuild indexes the deletes up to the frontier,
// which the snapshot does not hold.
func TestAppendAfterSnapshotRebuildSortsBeforeADelete(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	opts := Options{FS: fs, SegmentSize: 4096, InlineValueMax: 64}
	db := mustOpen(t, fs, opts)
	if _, err := db.Put(ctx, "b", []byte("k"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Append(ctx, Entry{Anchor: "b", Type: "delete", Key: []byte("k"), Counter: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateSnapshot(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if kinds := rebuildFromSnapshot(t, opts); !kinds[EventStateFromSnapshot] {
		t.Fatalf("fast path not taken: %v", kinds)
	}
	db = mustOpen(t, fs, opts)
	defer db.Close()
	// After the rebuild: a put on another anchor that sorts before b's delete.
	if _, err := db.Append(ctx, Entry{Anchor: "c", Type: "put", Key: []byte("k"), Value: []byte("y"), Counter: 500}); err != nil {
		t.Fatal(err)
	}
	if v, err := db.Get(ctx, []byte("k")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(k) = %q, %v; a replay of the log says not found (b's delete, counter 1000000, is last in merged order)", v.Value, err)
	}
}

// A truncation on an index rebuilt from a snapshot keeps the rows the index
// holds and adds none. The key's last record in a removed segment is here an
// old put whose delete stays in a later segment: added as a row, it would
// come back as the key's value.
func TestTruncationAfterSnapshotRebuildAddsNoRow(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	opts := Options{FS: fs, SegmentSize: 4096, InlineValueMax: 64}
	db := mustOpen(t, fs, opts)
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	fillAnchor(t, db, "a", 190, "x") // the put ends up in sealed segment 1
	// The delete lands in the active segment, which holds records after
	// the snapshot too: it is not truncated.
	if _, err := db.Delete(ctx, "a", []byte("k")); err != nil {
		t.Fatal(err)
	}
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil { // S1
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if kinds := rebuildFromSnapshot(t, opts); !kinds[EventStateFromSnapshot] {
		t.Fatalf("fast path not taken: %v", kinds)
	}
	db = mustOpen(t, fs, opts)
	defer db.Close()
	if v, err := db.Get(ctx, []byte("k")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after the fast rebuild: Get(k) = %q, %v; want not found", v.Value, err)
	}
	fillAnchor(t, db, "a", 40, "y")                                                // segment 8 (seqs 177..) seals past S1's frontier
	res, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}) // S2: truncates below S1
	if err != nil || res.RemovedBytes == 0 {
		t.Fatalf("compact: %v %s", err, res.Plan)
	}
	if v, err := db.Get(ctx, []byte("k")); !errors.Is(err, ErrNotFound) {
		rep, verr := db.Verify(ctx, VerifyOptions{})
		t.Logf("verify meanwhile: ok=%v err=%v failures=%v", rep.OK, verr, rep.Failures)
		t.Fatalf("after a truncation on the fast-rebuilt index: Get(k) = %q, %v; a replay says not found (a seq 192 deleted k, and is still in a segment)", v.Value, err)
	}
	// The old put, kept in the stub without a 'k' row, is still a record
	// Record reads, as after a full rebuild.
	if rec, err := db.Record(ctx, "a", 1); err != nil || string(rec.Value) != "x" {
		t.Fatalf("Record(a, 1) after the truncation = %q, %v; want the kept put", rec.Value, err)
	}
}

// A snapshot whose frontier lies below an anchor's log start (an old
// snapshot restored by hand: compaction truncates only below its oldest kept
// one) cannot stand for the records between them, which only stubs hold: the
// rebuild from the snapshot gives way to a full replay, which gives the same
// answers.
func TestSnapshotRebuildRefusesASnapshotBelowTheLogStart(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	opts := Options{FS: fs, SegmentSize: 4096, InlineValueMax: 64}
	db := mustOpen(t, fs, opts)
	fillAnchor(t, db, "a", 20, "x")
	old, err := db.CreateSnapshot(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	oldBytes := mustReadFile(t, fs, old.Path)
	fillAnchor(t, db, "a", 200, "y")
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil { // S1, and old goes
		t.Fatal(err)
	}
	fillAnchor(t, db, "a", 20, "z")
	if res, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil || res.RemovedBytes == 0 { // S2, cut below S1
		t.Fatalf("compact: %v %s", err, res.Plan)
	}
	want, err := db.Get(ctx, []byte("fill-y-0100"))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// Only the old snapshot is left, restored by hand.
	names, err := fs.List(db.SnapshotsDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := fs.Remove(fs.PathJoin(db.SnapshotsDir(), n)); err != nil {
			t.Fatal(err)
		}
	}
	mustWriteFile(t, fs, old.Path, oldBytes)
	plan, err := RebuildIndexWith(ctx, "db", opts, RebuildOptions{Apply: true, FromSnapshot: true})
	if err != nil {
		t.Fatal(err)
	}
	abandoned := false
	for _, ev := range plan.Report.Events {
		if ev.Kind == EventStateFromSnapshot {
			t.Fatalf("the index was built from a snapshot below the cut: %v", plan.Report.Events)
		}
		abandoned = abandoned || ev.Kind == EventFastRebuildAbandoned
	}
	if !abandoned {
		t.Fatalf("no fast_rebuild_abandoned event: %v", plan.Report.Events)
	}
	db = mustOpen(t, fs, opts)
	defer db.Close()
	if got, err := db.Get(ctx, []byte("fill-y-0100")); err != nil || !bytes.Equal(got.Value, want.Value) {
		t.Fatalf("Get after the rebuild = %q, %v; want %q", got.Value, err, want.Value)
	}
}

// rebuild-index --from-snapshot takes only a snapshot the audit log records
// as created (name, file hash and state hash); it skips the others with
// STATE_003 and falls back to a full replay when none is left. A snapshot's
// hashes are unkeyed: a well-formed one written beside the database's own,
// with the same frontier and one value changed, would otherwise become the
// rebuilt index's state, and Get would return the forged value without a
// word.
func TestSnapshotRebuildNeedsTheAuditLog(t *testing.T) {
	ctx := context.Background()
	key := []byte("k001")
	for _, tc := range []struct {
		name string
		// keep: the database's own snapshot stays beside the forgery;
		// breakAudit: the audit log's chain is broken, so it vouches for
		// nothing.
		keep, breakAudit bool
	}{
		{"beside the genuine one", true, false},
		{"alone", false, false},
		{"audit log broken", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			db, want := compactFixture(t, fs)
			if _, ok := want[string(key)]; !ok {
				t.Fatalf("the fixture's state has no %s", key)
			}
			s, err := db.CreateSnapshot(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			forged := forgeSnapshot(t, fs, db.SnapshotsDir(), s, key, s.Created.Add(time.Hour))
			audit := db.AuditPath()
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if !tc.keep {
				if err := fs.Remove(s.Path); err != nil {
					t.Fatal(err)
				}
			}
			if tc.breakAudit {
				// Two lines that are not audit lines: the chain fails at
				// the first (a failing last line alone reads as torn).
				f, err := fs.OpenReadWrite(audit, vfs.WriteCategoryUnspecified)
				if err != nil {
					t.Fatal(err)
				}
				st, err := f.Stat()
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteAt([]byte("{\"seq\":9}\n{\"seq\":10}\n"), st.Size()); err != nil {
					t.Fatal(err)
				}
				_ = f.Close()
			}
			opts := fixtureOptions(fs)
			plan, err := RebuildIndexWith(ctx, "db", opts, RebuildOptions{Apply: true, FromSnapshot: true})
			if err != nil {
				t.Fatal(err)
			}
			from := rebuildEvents(plan.Report, EventStateFromSnapshot)
			for _, ev := range from {
				if ev.File != s.Path {
					t.Fatalf("the rebuild took its state from %s, not the database's own %s", ev.File, s.Path)
				}
			}
			wantFast := tc.keep && !tc.breakAudit
			if got := len(from) == 1; got != wantFast {
				t.Fatalf("fast path taken: %v, want %v; events %+v", got, wantFast, plan.Report.Events)
			}
			if !wantFast && len(rebuildEvents(plan.Report, EventFastRebuildAbandoned)) == 0 {
				t.Fatalf("a full replay without a fast_rebuild_abandoned event: %+v", plan.Report.Events)
			}
			skipped := false
			for _, ev := range rebuildEvents(plan.Report, EventSnapshotSkipped) {
				if ev.File == forged.Path {
					skipped = true
					if ev.Err == nil || ev.Err.Code != errs.CodeDependencyMissing {
						t.Fatalf("the forgery was skipped with %v; want STATE_003", ev.Err)
					}
				}
			}
			if !skipped {
				t.Fatalf("no snapshot_skipped event for the forgery %s: %+v", forged.Path, plan.Report.Events)
			}
			db, err = Open("db", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			checkState(t, db, want)
		})
	}
}
