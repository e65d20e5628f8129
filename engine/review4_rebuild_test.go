package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// forgeSnapshot writes into dir a well-formed snapshot with s's frontier and
// entries, the value of key changed to "FORGED", created at created: what
// anybody who can write the snapshots directory can make, since the file's
// hashes are unkeyed. s stays.
func forgeSnapshot(t *testing.T, fs vfs.FS, dir string, s snapshot.Info, key []byte, created time.Time) snapshot.Info {
	t.Helper()
	r, err := snapshot.Open(fs, s.Path)
	if err != nil {
		t.Fatal(err)
	}
	var entries []snapshot.Entry
	changed := false
	for e, err := range r.Entries() {
		if err != nil {
			t.Fatal(err)
		}
		e = e.Clone()
		if bytes.Equal(e.Key, key) {
			e.Value, changed = []byte("FORGED"), true
		}
		entries = append(entries, e)
	}
	_ = r.Close()
	if !changed {
		t.Fatalf("snapshot %s has no key %q", s.Name, key)
	}
	forged, err := snapshot.Create(fs, dir, snapshot.Meta{Frontier: s.Frontier, PolicyRef: s.PolicyRef, Created: created},
		func(yield func(snapshot.Entry, error) bool) {
			for _, e := range entries {
				if !yield(e, nil) {
					return
				}
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	return forged
}

// rebuildEvents returns the report's events of kind.
func rebuildEvents(rep RecoveryReport, kind string) []RecoveryEvent {
	var out []RecoveryEvent
	for _, ev := range rep.Events {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// TestReview4RebuildFromSnapshotNeedsTheAuditLog: rebuild-index
// --from-snapshot took the newest snapshot whose file checked and whose
// frontier was the log's, and fed its state to the index as it stood. A
// well-formed snapshot written beside the database's own, with the same
// frontier and one value changed, became the rebuilt index's state: Get
// returned the forged value, and nothing said so. The fast path now takes
// only a snapshot the audit log records as created (name, file hash and
// state hash), skips the others with STATE_003, and falls back to a full
// replay when none is left.
func TestReview4RebuildFromSnapshotNeedsTheAuditLog(t *testing.T) {
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

// TestReview4SnapshotOrderIsTheFrontiers: snapshots were ordered by their
// creation time (which their names embed too). After the clock went back,
// a snapshot of a later frontier sorted before the older ones: compaction
// took the older one for "the newest" — it counted the records since it,
// so an immediate rerun with nothing new created yet another snapshot, and
// keep_snapshots deleted the newest state and kept the older one — and
// rebuild-index --from-snapshot started from the older one. Snapshots of
// one log are ordered by their frontiers now, which only grow.
func TestReview4SnapshotOrderIsTheFrontiers(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	var clockMu sync.Mutex
	clock := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	setClock := func(t time.Time) { clockMu.Lock(); now = t; clockMu.Unlock() }
	opts := fixtureOptions(fs)
	opts.Clock = clock
	db := mustOpen(t, fs, opts)
	policy := snapshot.Policy{Version: "v1", Snapshot: snapshot.Triggers{EveryRecords: 1}, KeepSnapshots: 1, RawLog: "forever", VerifyBeforeDelete: true}
	want := map[string]string{}
	put := func(tag string) {
		for i := 0; i < 20; i++ {
			k, v := fmt.Sprintf("k%02d", i), fmt.Sprintf("%s-%d", tag, i)
			if _, err := db.Put(ctx, fmt.Sprintf("a%d", i%2), []byte(k), []byte(v)); err != nil {
				t.Fatal(err)
			}
			want[k] = v
		}
	}
	covered := func(s snapshot.Info) uint64 {
		var n uint64
		for _, h := range s.Frontier {
			n += h.Seq
		}
		return n
	}
	put("first")
	if _, err := db.Compact(ctx, policy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	// The clock goes back an hour before each of two more runs.
	for i, tag := range []string{"second", "third"} {
		put(tag)
		setClock(now.Add(-time.Hour))
		if _, err := db.Compact(ctx, policy, CompactOptions{Apply: true}); err != nil {
			t.Fatal(err)
		}
		list, err := db.Snapshots(ctx)
		if err != nil {
			t.Fatal(err)
		}
		newest := list[len(list)-1]
		if covered(newest) != uint64(20*(i+2)) {
			t.Fatalf("run %d: the newest snapshot %s covers %d records; the log holds %d", i+2, newest.Name, covered(newest), 20*(i+2))
		}
		// Nothing new since: no trigger fires.
		res, err := db.Compact(ctx, policy, CompactOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range res.Plan.Actions {
			if a.Kind == snapshot.ActionCreateSnapshot {
				t.Fatalf("run %d: with no record since the newest snapshot, the plan creates another: %s", i+2, a.Reason)
			}
		}
	}
	list, err := db.Snapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	newest := list[len(list)-1]
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	plan, err := RebuildIndexWith(ctx, "db", opts, RebuildOptions{Apply: true, FromSnapshot: true})
	if err != nil {
		t.Fatal(err)
	}
	from := rebuildEvents(plan.Report, EventStateFromSnapshot)
	if len(from) != 1 || from[0].File != newest.Path {
		t.Fatalf("rebuild from %+v; want the snapshot of the newest frontier, %s", from, newest.Path)
	}
	db = mustOpen(t, fs, opts)
	defer db.Close()
	checkState(t, db, want)
}

// TestReview4RebuildHoldsTheLockThroughout: RebuildIndexWith let the
// database's lock go between removing the index and the Open that rebuilds
// it, so another process could open the database then (and rebuild the
// index its own way), and this rebuild failed with STATE_001 after it had
// dropped the index. The lock is held from before the removal through the
// rebuild now.
func TestReview4RebuildHoldsTheLockThroughout(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, want := compactFixture(t, fs)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	var lockErr error
	tried := false
	rebuildIndexRemoved = func() {
		tried = true
		var other *DB
		if other, lockErr = Open("db", fixtureOptions(fs)); lockErr == nil {
			_ = other.Close()
		}
	}
	defer func() { rebuildIndexRemoved = nil }()
	plan, err := RebuildIndexWith(ctx, "db", fixtureOptions(fs), RebuildOptions{Apply: true})
	if err != nil || !plan.Applied || !plan.Report.Rebuilt {
		t.Fatalf("rebuild: %+v %v", plan, err)
	}
	if !tried {
		t.Fatal("the hook did not run")
	}
	if errs.CodeOf(lockErr) != errs.CodeScopeLocked {
		t.Fatalf("an Open between the index's removal and its rebuild: %v; want STATE_001", lockErr)
	}
	db = mustOpen(t, fs, fixtureOptions(fs))
	defer db.Close()
	checkState(t, db, want)
}

// TestReview4CompactionIgnoresASnapshotOfAnotherLog: the planner counted
// every snapshot whose file checked. A well-formed snapshot whose frontier
// is not the log's (another database's, or one made up) then stood as the
// newest: keep_snapshots deleted the database's own snapshots, and no
// record counted as unsnapshotted, so none was taken again. It is left out
// of the plan now, with a note, like a snapshot that cannot be read.
func TestReview4CompactionIgnoresASnapshotOfAnotherLog(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, _ := compactFixture(t, fs)
	defer db.Close()
	policy := snapshot.Policy{Version: "v1", Snapshot: snapshot.Triggers{EveryRecords: 1}, KeepSnapshots: 1, RawLog: "forever", VerifyBeforeDelete: true}
	res, err := db.Compact(ctx, policy, CompactOptions{Apply: true})
	if err != nil || res.Created == nil {
		t.Fatalf("compact: %+v %v", res, err)
	}
	own := *res.Created
	far := snapshot.Frontier{}
	for id, h := range own.Frontier {
		far[id] = snapshot.Head{Seq: h.Seq + 1000, Hash: h.Hash}
	}
	foreign, err := snapshot.Create(fs, db.SnapshotsDir(), snapshot.Meta{Frontier: far}, func(func(snapshot.Entry, error) bool) {})
	if err != nil {
		t.Fatal(err)
	}
	fillAnchor(t, db, "a0", 5, "more")
	res, err = db.Compact(ctx, policy, CompactOptions{Apply: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Created == nil {
		t.Fatalf("records since the database's own snapshot, yet none was taken: %+v", res.Plan)
	}
	for _, a := range res.Plan.Actions {
		if a.Kind == snapshot.ActionDeleteSnapshot && a.Snapshot == foreign.Name {
			t.Fatalf("the plan deletes the foreign snapshot, which is not the database's: %+v", a)
		}
	}
	list, err := db.Snapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, s := range list {
		names[s.Name] = true
	}
	if !names[res.Created.Name] {
		t.Fatalf("the snapshot just taken is gone: %v", names)
	}
	noted := false
	for _, n := range res.Plan.Notes {
		noted = noted || strings.Contains(n, foreign.Name)
	}
	if !noted {
		t.Fatalf("no note names %s: %q", foreign.Name, res.Plan.Notes)
	}
}

// halfRemoveFS fails RemoveAll of a directory named like the index after
// removing half of its entries: what a crash in the middle of a removal
// leaves.
type halfRemoveFS struct {
	vfs.FS
	fired bool
}

func (f *halfRemoveFS) RemoveAll(path string) error {
	if f.fired || !strings.Contains(f.PathBase(path), IndexDir) {
		return f.FS.RemoveAll(path)
	}
	f.fired = true
	names, err := f.List(path)
	if err != nil {
		return err
	}
	slices.Sort(names)
	for _, n := range names[:len(names)/2] {
		_ = f.FS.RemoveAll(f.PathJoin(path, n))
	}
	return errors.New("injected: the removal stopped half way")
}

// TestReview4RebuildInterruptedWhileDroppingTheIndex: rebuild-index
// removes the index in place, file by file. Stopped part way (a crash, a
// failed unlink) it leaves a Pebble directory whose MANIFEST names tables
// that are gone. Not a bug: the next Open finds the index unreadable, moves
// it to lost+found and rebuilds it (index_unreadable); this keeps it so.
func TestReview4RebuildInterruptedWhileDroppingTheIndex(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	db, want := compactFixture(t, mem)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if names, _ := mem.List("db/" + IndexDir); len(names) < 2 {
		t.Fatalf("the fixture's index holds %v", names)
	}
	fs := &halfRemoveFS{FS: mem}
	_, rerr := RebuildIndexWith(ctx, "db", fixtureOptions(fs), RebuildOptions{Apply: true})
	if !fs.fired {
		t.Fatal("the removal was not interrupted")
	}
	if errs.CodeOf(rerr) != errs.CodeWriteFailed {
		t.Fatalf("rebuild stopped while it removed the index: %v; want IO_001", rerr)
	}
	db, err := Open("db", fixtureOptions(mem))
	if err != nil {
		t.Fatalf("open after a rebuild stopped while it dropped the index: %v", err)
	}
	if !db.RecoveryReport().Rebuilt {
		t.Fatalf("the half-removed index was not rebuilt: %+v", db.RecoveryReport())
	}
	defer db.Close()
	checkState(t, db, want)
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("verify: %v %+v", err, rep.Failures)
	}
	if left, _ := mem.List("db/tmp"); len(left) > 0 {
		t.Fatalf("%v left in db/tmp", left)
	}
}

// TestReview4RebuildRefusedWhileOpen: a rebuild of a database open for
// writing elsewhere is STATE_001, and removes nothing.
func TestReview4RebuildRefusedWhileOpen(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, want := compactFixture(t, fs)
	defer db.Close()
	// What the rebuild removes or renames, through its own view of the
	// files: the open database's Pebble may flush or compact (and so
	// remove tables) meanwhile, which a count of the index's files took
	// for the rebuild's doing.
	rec := &removalRecorder{FS: fs}
	_, err := RebuildIndexWith(ctx, "db", fixtureOptions(rec), RebuildOptions{Apply: true, FromSnapshot: true})
	if errs.CodeOf(err) != errs.CodeScopeLocked {
		t.Fatalf("rebuild of an open database: %v; want STATE_001", err)
	}
	if len(rec.changed) > 0 {
		t.Fatalf("the refused rebuild removed or renamed %v", rec.changed)
	}
	checkState(t, db, want)
}

// removalRecorder records every path its user removes or renames.
type removalRecorder struct {
	vfs.FS
	mu      sync.Mutex
	changed []string
}

func (r *removalRecorder) note(path string) {
	r.mu.Lock()
	r.changed = append(r.changed, path)
	r.mu.Unlock()
}

func (r *removalRecorder) Remove(name string) error    { r.note(name); return r.FS.Remove(name) }
func (r *removalRecorder) RemoveAll(name string) error { r.note(name); return r.FS.RemoveAll(name) }
func (r *removalRecorder) Rename(oldname, newname string) error {
	r.note(oldname)
	return r.FS.Rename(oldname, newname)
}

// TestReview4StatsIgnoreASnapshotOfAnotherLog: Stats measured the records
// not yet in a snapshot from the newest readable snapshot, whatever its
// frontier: one of another history with larger seqs made every record
// look covered.
func TestReview4StatsIgnoreASnapshotOfAnotherLog(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, _ := compactFixture(t, fs)
	defer db.Close()
	far := snapshot.Frontier{}
	for info, err := range db.Anchors(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		far[info.ID] = snapshot.Head{Seq: info.Records + 1000, Hash: info.HeadHash}
	}
	if _, err := snapshot.Create(fs, db.SnapshotsDir(), snapshot.Meta{Frontier: far}, func(func(snapshot.Entry, error) bool) {}); err != nil {
		t.Fatal(err)
	}
	st, err := db.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.RecordsUnsnapshotted != 400 {
		t.Fatalf("records not in a snapshot: %d; want all 400 (the only snapshot is not of this log)", st.RecordsUnsnapshotted)
	}
}
