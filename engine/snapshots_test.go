package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

func TestSnapshotCreateVerifyAndCorruption(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{SegmentSize: 4096, InlineValueMax: 16})
	defer db.Close()
	for i := 0; i < 300; i++ {
		a := fmt.Sprintf("a%d", i%4)
		k := []byte(fmt.Sprintf("k%02d", i%37))
		var err error
		if i%9 == 0 {
			_, err = db.Delete(ctx, a, k)
		} else {
			// Values beyond InlineValueMax are read from their segments.
			_, err = db.Put(ctx, a, k, []byte(fmt.Sprintf("value-%d-%s", i, "padding-beyond-inline")))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	info, err := db.CreateSnapshot(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	live := 0
	for range db.Scan(ctx, nil) {
		live++
	}
	if info.Entries != uint64(live) || len(info.Frontier) != 4 {
		t.Fatalf("snapshot has %d entries and %d anchors; state has %d keys", info.Entries, len(info.Frontier), live)
	}
	// More writes after the snapshot do not change what it proves.
	if _, err := db.Put(ctx, "a0", []byte("k00"), []byte("later")); err != nil {
		t.Fatal(err)
	}
	v, err := db.VerifySnapshot(ctx, info.Path)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if v.ReplayedRecords != 300 || v.ReplayStateHash != info.StateHash {
		t.Fatalf("replay: %+v", v)
	}
	list, err := db.Snapshots(ctx)
	if err != nil || len(list) != 1 || list[0].Name != info.Name {
		t.Fatalf("list: %+v %v", list, err)
	}
	// One byte flipped anywhere: INT_003, never a panic.
	data, _ := fs.UnsafeGetFileDataBuffer(info.Path)
	for _, off := range []int{0, 20, len(data) / 2, len(data) - 40, len(data) - 1} {
		data[off] ^= 0x10
		_, err := db.VerifySnapshot(ctx, info.Path)
		data[off] ^= 0x10
		if !errors.Is(err, ErrSnapshotCorrupted) {
			t.Fatalf("flip at %d: %v, want INT_003", off, err)
		}
	}
	if _, err := db.VerifySnapshot(ctx, info.Path); err != nil {
		t.Fatalf("restored file: %v", err)
	}
	// A well-formed snapshot whose state is not what the log says: the
	// replay proof catches it.
	f := info.Frontier
	forged, err := snapshot.Create(fs, db.SnapshotsDir(), snapshot.Meta{Frontier: f},
		func(yield func(snapshot.Entry, error) bool) {
			yield(snapshot.Entry{Key: []byte("k01"), Value: []byte("forged"), Version: snapshot.Version{Anchor: "a1", Seq: 1, Counter: 2}}, nil)
		})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.VerifySnapshot(ctx, forged.Path); !errors.Is(err, ErrSnapshotCorrupted) {
		t.Fatalf("forged state: %v, want INT_003", err)
	}
	// A frontier whose head hash is not the log's.
	h := f["a2"]
	h.Hash[0] ^= 1
	f2 := snapshot.Frontier{}
	for k, v := range f {
		f2[k] = v
	}
	f2["a2"] = h
	orig, err := snapshot.Open(fs, info.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	wrong, err := snapshot.Create(fs, db.SnapshotsDir(), snapshot.Meta{Frontier: f2}, orig.Entries())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.VerifySnapshot(ctx, wrong.Path); !errors.Is(err, ErrSnapshotCorrupted) {
		t.Fatalf("wrong frontier: %v, want INT_003", err)
	}
}

func TestVerifyReportsCorruptSnapshotsAndAudit(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, _ := compactFixture(t, fs)
	defer db.Close()
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil || !rep.OK {
		t.Fatalf("clean database: %+v %v", rep, err)
	}
	list, _ := db.Snapshots(ctx)
	data, _ := fs.UnsafeGetFileDataBuffer(list[0].Path)
	data[len(data)/2] ^= 1
	rep, err = db.Verify(ctx, VerifyOptions{})
	if err != nil || rep.OK || len(rep.Failures) != 1 || rep.Failures[0].Code != CodeOf(ErrSnapshotCorrupted) || rep.Failures[0].File != list[0].Path {
		t.Fatalf("corrupt snapshot: %+v %v", rep, err)
	}
	data[len(data)/2] ^= 1
	// The audit log losing its last line is told from a torn append by the
	// head the index kept.
	audit, _ := fs.UnsafeGetFileDataBuffer(db.AuditPath())
	f, _ := fs.Create(db.AuditPath(), vfs.WriteCategoryUnspecified)
	cut := bytes.LastIndexByte(audit[:len(audit)-1], '\n') + 1
	_, _ = f.Write(append([]byte(nil), audit[:cut]...))
	_ = f.Close()
	rep, err = db.Verify(ctx, VerifyOptions{})
	if err != nil || rep.OK || rep.Failures[0].File != db.AuditPath() {
		t.Fatalf("audit log missing its last line: %+v %v", rep, err)
	}
}

// TestCreateSnapshotIsAudited: every snapshot made in the database, not only
// a compaction's, is recorded in the audit log with its hashes, which is
// what verify holds a snapshot to once the log below it is truncated.
func TestCreateSnapshotIsAudited(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{FS: fs})
	defer db.Close()
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	info, err := db.CreateSnapshot(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	audited, err := db.auditedSnapshots()
	if err != nil {
		t.Fatal(err)
	}
	it, ok := audited[info.Name]
	if !ok || it.StateHash != info.StateHash || it.Hash != info.FileHash {
		t.Fatalf("the audit log records %+v (found %v) for snapshot %+v", it, ok, info)
	}
	if _, err := db.VerifyAuditLog(ctx); err != nil {
		t.Fatal(err)
	}
}

// VerifySnapshot over a truncated log replays from an older snapshot (the
// base). When a record after the base's frontier sorts before the base's
// last record, the base is no prefix of the replay: that is a replay the
// database cannot do (a note), not a corrupt snapshot (INT_003, CONTRACT
// §6).
func TestVerifySnapshotFromABaseTheTailSortsBefore(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{SegmentSize: 4096, InlineValueMax: 64})
	defer db.Close()
	policy := snapshot.Policy{Version: "v1", Snapshot: snapshot.Triggers{EveryRecords: 1},
		KeepSnapshots: 2, RawLog: "truncate"}
	fillAnchor(t, db, "a", 200, "x")
	if _, err := db.Append(ctx, Entry{Anchor: "b", Type: "put", Key: []byte("k"), Value: []byte("B"), Counter: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	if _, err := coveredCompact(t, db, policy, CompactOptions{Apply: true}); err != nil { // S1
		t.Fatal(err)
	}
	// After S1, a put of k on a new anchor that sorts *before* b's put.
	if _, err := db.Append(ctx, Entry{Anchor: "c", Type: "put", Key: []byte("k"), Value: []byte("C"), Counter: 500}); err != nil {
		t.Fatal(err)
	}
	if v, err := db.Get(ctx, []byte("k")); err != nil || string(v.Value) != "B" {
		t.Fatalf("Get(k) = %q, %v; want B (counter 1000000 is last)", v.Value, err)
	}
	res, err := coveredCompact(t, db, policy, CompactOptions{Apply: true}) // S2, truncates a below S1
	if err != nil {
		t.Fatal(err)
	}
	if res.RemovedBytes == 0 || res.Created == nil {
		t.Fatalf("expected a snapshot and a truncation: %s", res.Plan)
	}
	v, err := db.VerifySnapshot(ctx, res.Created.Path)
	if err != nil {
		t.Fatalf("VerifySnapshot of the database's own snapshot (base %q): %v", v.Base, err)
	}
	if v.Replayed || !strings.Contains(v.Note, "sorts before") {
		t.Fatalf("replayed %v, note %q: want no replay, and a note that says why", v.Replayed, v.Note)
	}
}

// VerifySnapshot (snapshot verify) of a snapshot it cannot prove by replay
// (the log below it truncated, no older snapshot to start from) requires the
// audit log's record of the snapshot's creation, with the same file and
// state hashes; INT_003 otherwise. Those hashes are unkeyed, so without the
// record a rewrite with another value would pass as ok. A base a replay
// starts from must be so recorded too, or a pair of rewrites, the newer
// replayed from the older, would prove each other.
func TestVerifySnapshotHoldsAnUnreplayableSnapshotToTheAuditLog(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, _ := compactFixture(t, fs)
	defer db.Close()
	// Two compactions: the first snapshot s1 is below the cut, which no
	// older snapshot covers; the second, s2, replays from it.
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	fillAnchor(t, db, "a1", 30, "late")
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	list, err := db.Snapshots(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("snapshots: %d %v", len(list), err)
	}
	s1, s2 := list[0], list[1]
	if v, err := db.VerifySnapshot(ctx, s1.Path); err != nil || v.Replayed {
		t.Fatalf("the scenario needs a snapshot the log cannot replay: %+v %v", v, err)
	}
	if v, err := db.VerifySnapshot(ctx, s2.Path); err != nil || !v.Replayed || v.Base != s1.Name {
		t.Fatalf("the scenario needs a snapshot replayed from %s: %+v %v", s1.Name, v, err)
	}
	// A key of the fixture's, which fillAnchor does not write.
	key := []byte("k001")

	f1 := rewriteSnapshot(t, fs, db, s1, key)
	_, err = db.VerifySnapshot(ctx, f1.Path)
	var e *errs.Error
	if !errors.As(err, &e) || e.Code != errs.CodeSnapshotCorrupted || e.File != f1.Path {
		t.Fatalf("VerifySnapshot of a rewritten snapshot the log cannot replay: %v; want INT_003 naming %s", err, f1.Path)
	}
	// The genuine s2 is not replayed from the rewrite (nor blamed for it):
	// without a base the audit log vouches for, it is held to its own
	// record, which it matches.
	if v, err := db.VerifySnapshot(ctx, s2.Path); err != nil || v.Base == f1.Name {
		t.Fatalf("VerifySnapshot of %s with a rewritten base beside it: %+v %v", s2.Name, v, err)
	}
	f2 := rewriteSnapshot(t, fs, db, s2, key)
	if v, err := db.VerifySnapshot(ctx, f2.Path); err == nil {
		t.Fatalf("a rewritten snapshot proves from the rewritten base %q: %+v", v.Base, v)
	}
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil || rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	bad := map[string]bool{}
	for _, f := range rep.Failures {
		if f.Code != errs.CodeSnapshotCorrupted {
			t.Errorf("finding %+v; want INT_003 only", f)
		}
		bad[f.File] = true
	}
	for _, p := range []string{f1.Path, f2.Path, s1.Path, s2.Path} {
		if !bad[p] {
			t.Errorf("no finding for %s: %+v", p, rep.Failures)
		}
	}
	checkFindingMessages(t, rep)
}

// Snapshots of one log are ordered by their frontiers, which only grow, not
// by their creation time (which their names embed). After the clock goes
// back, a snapshot of a later frontier has an earlier time. Ordered by time,
// compaction would take an older snapshot for the newest (counting the
// records since it, so an immediate rerun with nothing new creates yet
// another snapshot, and keep_snapshots deletes the newest state and keeps
// the older one), and rebuild-index --from-snapshot would start from the
// older one.
func TestSnapshotsAreOrderedByTheirFrontiers(t *testing.T) {
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

// A snapshot is durable when CreateSnapshot returns, so the records its
// frontier names must be too, NoSync appends that are in the index but not
// yet fsynced in the journal included. Otherwise a power loss after the
// snapshot is written leaves a snapshot (in the audit log, too) whose
// frontier the log no longer holds, and verify fails (INT_003) on a database
// nobody has touched.
func TestSnapshotOfNoSyncAppendsSurvivesPowerLoss(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	var mu sync.Mutex
	var clones []*vfs.MemFS
	var capture atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if capture.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			mu.Lock()
			clones = append(clones, testutil.CrashClone(mem, vfs.CrashCloneCfg{})) // every unsynced byte lost
			mu.Unlock()
		}
		return nil
	})
	opts := Options{SegmentSize: 4096}
	db := mustOpen(t, errorfs.Wrap(testutil.LockOrdered(mem), inj), opts)
	for i := 0; i < 20; i++ {
		if _, err := db.Put(ctx, "a", []byte(fmt.Sprintf("k%02d", i)), []byte("synced")); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 20; i++ {
		if _, err := db.Put(ctx, "a", []byte(fmt.Sprintf("k%02d", i)), []byte("nosync"), WithNoSync(true)); err != nil {
			t.Fatal(err)
		}
	}
	capture.Store(true)
	info, err := db.CreateSnapshot(ctx, "")
	capture.Store(false)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d crash points; snapshot %s at %v", len(clones), info.Name, info.Frontier)
	for i, c := range clones {
		o := opts
		o.FS = c
		db, err := Open("db", o)
		if err != nil {
			t.Fatalf("crash point %d: open: %v", i, err)
		}
		list, err := db.Snapshots(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list {
			if v, err := db.VerifySnapshot(ctx, s.Path); err != nil {
				t.Fatalf("crash point %d: snapshot %s at %v does not verify: %v (%+v)", i, s.Name, s.Frontier, err, v)
			}
		}
		if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
			t.Fatalf("crash point %d: verify: %v %+v", i, err, rep.Failures)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// A replay that starts from the snapshot being verified proves nothing about
// it, so the target is never its own base, also when it is named another way
// (an absolute path for a relative one, which is what `anchordb snapshot
// verify PATH` passes). Otherwise a snapshot rewritten with other values
// after the log below it was truncated would be "proved" by a replay of zero
// records.
func TestVerifySnapshotIsNotItsOwnBase(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, _ := compactFixture(t, fs)
	defer db.Close()
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	fillAnchor(t, db, "a1", 30, "late")
	if res, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil || res.RemovedBytes == 0 {
		t.Fatalf("compact: %v %s", err, res.Plan)
	}
	list, err := db.Snapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var target *snapshot.Info
	for i := range list {
		v, err := db.VerifySnapshot(ctx, list[i].Path)
		if err != nil {
			t.Fatal(err)
		}
		if !v.Replayed {
			target = &list[i]
		}
	}
	if target == nil {
		t.Fatal("no snapshot below which the log was truncated without a base")
	}
	// Rewrite it with another value for one key: well-formed, same frontier.
	s, err := snapshot.Open(fs, target.Path)
	if err != nil {
		t.Fatal(err)
	}
	var entries []snapshot.Entry
	for e, err := range s.Entries() {
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e.Clone())
	}
	s.Close()
	entries[0].Value = []byte("forged")
	forged, err := snapshot.Create(fs, "forge", snapshot.Meta{Frontier: target.Frontier, Created: target.Created},
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
	mustWriteFile(t, fs, target.Path, mustReadFile(t, fs, forged.Path))
	// The same file, named from the root.
	v, err := db.VerifySnapshot(ctx, "/"+target.Path)
	if err == nil && v.Replayed {
		t.Fatalf("a snapshot rewritten with another value proves by replay from base %q (%d records replayed): %+v", v.Base, v.ReplayedRecords, v)
	}
}

// rewriteSnapshot writes a snapshot with s's frontier and entries, the
// value of key changed, into the snapshots directory, removes s and
// returns the new one: well-formed, hashes recomputed, another name.
func rewriteSnapshot(t *testing.T, fs vfs.FS, db *DB, s snapshot.Info, key []byte) snapshot.Info {
	t.Helper()
	forged := forgeSnapshot(t, fs, db.SnapshotsDir(), s, key, s.Created)
	if err := snapshot.Delete(fs, s.Path); err != nil {
		t.Fatal(err)
	}
	return forged
}
