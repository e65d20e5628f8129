package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// crashBeforeSnapshotAuditLine runs a compaction that takes a snapshot and
// cuts the log, and returns the state a crash leaves at the moment the new
// snapshot's file is durable and its audit line not yet written: the
// compaction's first write to the audit log. The compaction itself goes on
// to the end in mem. want is the state the database holds.
func crashBeforeSnapshotAuditLine(t *testing.T) (clone *vfs.MemFS, want map[string]string) {
	t.Helper()
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	db, want := compactFixture(t, mem)
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		k := fmt.Sprintf("k%03d", 200+i)
		if _, err := db.Put(ctx, "a2", []byte(k), []byte("late")); err != nil {
			t.Fatal(err)
		}
		want[k] = "late"
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	var capture atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if capture.Load() && op.Kind == errorfs.OpFileWriteAt && strings.HasSuffix(op.Path, AuditFile) {
			// Only what was synced survives: the snapshot (Create syncs
			// it and its directory) and the index's note of the line to
			// come, not the line.
			once.Do(func() { clone = testutil.CrashClone(mem, vfs.CrashCloneCfg{UnsyncedDataPercent: 0}) })
		}
		return nil
	})
	db, err := Open("db", fixtureOptions(errorfs.Wrap(testutil.LockOrdered(mem), inj)))
	if err != nil {
		t.Fatal(err)
	}
	// The checkpoint that lets the cut go ahead has an audit line of its
	// own (create_checkpoint): it is written before the capture starts.
	skey, _ := coverKeys(t)
	if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
		t.Fatal(err)
	}
	capture.Store(true)
	res, err := db.Compact(ctx, truncatePolicy, CompactOptions{Apply: true})
	capture.Store(false)
	if err != nil || res.Created == nil || res.RemovedBytes == 0 {
		t.Fatalf("scenario: the compaction does not both take a snapshot and cut: %+v %v", res, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if clone == nil {
		t.Fatal("scenario: the compaction wrote no audit line")
	}
	return clone, want
}

// TestCompactCrashBeforeSnapshotAuditLine: a crash between a compaction's
// new snapshot file and its audit line leaves a snapshot of the database's
// own that the audit log does not record. The compactions after the crash
// finish the job and cut below it; verify must never call it corrupt
// (INT_003): it is the database's state at its frontier, proved by replay
// before the cut. The clock may also have gone back across the crash (a
// machine whose clock was fixed on reboot), which dates the snapshot after
// now.
func TestCompactCrashBeforeSnapshotAuditLine(t *testing.T) {
	ctx := context.Background()
	for _, back := range []time.Duration{0, time.Hour} {
		t.Run(fmt.Sprintf("clock_back_%s", back), func(t *testing.T) {
			clone, want := crashBeforeSnapshotAuditLine(t)
			opts := fixtureOptions(clone)
			opts.Clock = func() time.Time { return time.Now().Add(-back) }
			db, err := Open("db", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			list, err := db.Snapshots(ctx)
			if err != nil {
				t.Fatal(err)
			}
			audited, err := db.SnapshotsAudited(ctx, list)
			if err != nil {
				t.Fatal(err)
			}
			var left []snapshot.Info
			for i, s := range list {
				if s.Err == nil && !audited[i] {
					left = append(left, s)
				}
			}
			if len(left) != 1 {
				t.Fatalf("scenario: want one snapshot the audit log lacks, got %d of %d", len(left), len(list))
			}
			checkState(t, db, want)
			for run := 1; run <= 3; run++ {
				// New records each time: a snapshot and a cut each run, the
				// cut moving past the leftover's frontier.
				fillAnchor(t, db, "a2", 80, fmt.Sprintf("run%d", run))
				for i := 0; i < 80; i++ {
					want[fmt.Sprintf("fill-run%d-%04d", run, i)] = "some filler value of a few dozen bytes"
				}
				res, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true})
				if err != nil {
					t.Fatalf("compaction %d after the crash: %v", run, err)
				}
				checkState(t, db, want)
				if run == 1 {
					// The first run cuts: the leftover is proved and
					// adopted before the cut, whatever its date.
					audited, err := db.auditedSnapshots()
					if err != nil {
						t.Fatal(err)
					}
					if it, ok := audited[left[0].Name]; !ok || it.Hash != left[0].FileHash {
						t.Fatalf("the crash's snapshot %s was not adopted before the cut:\n%s", left[0].Name, res.Plan)
					}
				}
				rep, err := db.Verify(ctx, VerifyOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if !rep.OK {
					t.Fatalf("verify after compaction %d: %+v\n%s", run, rep.Failures, res.Plan)
				}
			}
		})
	}
}

// TestCompactTimeTriggerAfterTheClockWentBack: a snapshot the database took
// while its clock ran a year ahead is dated a year after now once the clock
// is set right, and every_seconds measured its age as negative: no snapshot
// for a year, however many records came. The plan now takes a snapshot
// dated after now as due, and once the new snapshot (dated now) is the
// newest, the trigger measures from it again.
func TestCompactTimeTriggerAfterTheClockWentBack(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	opts := fixtureOptions(fs)
	var ahead atomic.Bool
	opts.Clock = func() time.Time {
		if ahead.Load() {
			return time.Now().AddDate(1, 0, 0)
		}
		return time.Now()
	}
	db, err := Open("db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fillAnchor(t, db, "a", 50, "x")
	ahead.Store(true)
	future, err := db.CreateSnapshot(ctx, "")
	ahead.Store(false)
	if err != nil {
		t.Fatal(err)
	}
	policy := snapshot.Policy{Version: "v1", Snapshot: snapshot.Triggers{EverySeconds: 3600}, KeepSnapshots: 2,
		RawLog: "forever", VerifyBeforeDelete: true}
	fillAnchor(t, db, "a", 5, "y")
	res, err := db.Compact(ctx, policy, CompactOptions{Apply: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Created == nil || res.Plan.Actions[0].Trigger != "every_seconds" {
		t.Fatalf("the newest snapshot is dated a year after now and 5 records wait: want a snapshot (every_seconds), got\n%s", res.Plan)
	}
	if !slices.ContainsFunc(res.Plan.Notes, func(n string) bool { return strings.Contains(n, future.Name) && strings.Contains(n, "after now") }) {
		t.Fatalf("no note says %s is dated after now: %q", future.Name, res.Plan.Notes)
	}
	// Due once, not every run: the new snapshot, dated now, is the newest.
	fillAnchor(t, db, "a", 5, "z")
	res, err = db.Compact(ctx, policy, CompactOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Plan.Actions) != 0 {
		t.Fatalf("a snapshot taken seconds ago, every_seconds=3600: want nothing to do, got\n%s", res.Plan)
	}
}

// TestCompactAdoptionCrashAtEveryWrite: the compaction after that crash
// adopts the leftover snapshot and cuts the log. A second crash at any
// write of it (with the clock set back, so the leftover is dated after
// now, or not) leaves a database that opens, reads the same state and
// verifies (SPEC §6); a compaction after it finishes the job, and a later
// one whose cut passes the leftover's frontier leaves verify clean too —
// never INT_003 for the leftover, which is the database's own.
func TestCompactAdoptionCrashAtEveryWrite(t *testing.T) {
	ctx := context.Background()
	for _, back := range []time.Duration{0, time.Hour} {
		t.Run(fmt.Sprintf("clock_back_%s", back), func(t *testing.T) {
			mem, want := crashBeforeSnapshotAuditLine(t)
			clock := func() time.Time { return time.Now().Add(-back) }
			// Every eighth write (every 128th under the race detector, after
			// the plain pass has visited the eighths), and the state the
			// whole compaction leaves: some 650 points a variant, every
			// one, cost minutes for the same few steps of the plan (most
			// writes are Pebble's and the stubs'); an eighth of them still
			// crashes inside each audit line, stub and removal. Only the
			// points taken are cloned: a clone copies the whole MemFS.
			stride := 8 * testutil.RaceStride(16)
			var mu sync.Mutex
			var clones []*vfs.MemFS
			var writes int
			var capture atomic.Bool
			rng := rand.New(rand.NewPCG(5, uint64(back)))
			cfg := func() vfs.CrashCloneCfg {
				return vfs.CrashCloneCfg{UnsyncedDataPercent: 30, RNG: rand.New(rand.NewPCG(rng.Uint64(), 1))}
			}
			inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
				if capture.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
					mu.Lock()
					if writes%stride == 0 {
						clones = append(clones, testutil.CrashClone(mem, cfg()))
					}
					writes++
					mu.Unlock()
				}
				return nil
			})
			opts := fixtureOptions(errorfs.Wrap(testutil.LockOrdered(mem), inj))
			opts.Clock = clock
			db, err := Open("db", opts)
			if err != nil {
				t.Fatal(err)
			}
			capture.Store(true)
			res, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true})
			capture.Store(false)
			if err != nil || res.RemovedBytes == 0 {
				t.Fatalf("scenario: the compaction after the crash cuts nothing: %+v %v", res, err)
			}
			mu.Lock()
			clones = append(clones, testutil.CrashClone(mem, cfg()))
			mu.Unlock()
			_ = db.Close()
			t.Logf("%d crash points of %d writes", len(clones), writes)
			for i, c := range clones {
				opts := fixtureOptions(c)
				opts.Clock = clock
				db, err := Open("db", opts)
				if err != nil {
					t.Fatalf("crash point %d: open: %v", i, err)
				}
				checkState(t, db, want)
				if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
					t.Fatalf("crash point %d: verify: %v %+v", i, err, rep.Failures)
				}
				if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
					t.Fatalf("crash point %d: compact again: %v", i, err)
				}
				checkState(t, db, want)
				if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
					t.Fatalf("crash point %d: verify after compacting again: %v %+v", i, err, rep.Failures)
				}
				// Records and runs until the cut passes the leftover's
				// frontier and no snapshot at that frontier is left to
				// replay it from: it was adopted, or verify calls it
				// corrupt.
				for run := 0; run < 2; run++ {
					fillAnchor(t, db, "a2", 80, fmt.Sprintf("after%d", run))
					if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
						t.Fatalf("crash point %d: compact with new records: %v", i, err)
					}
				}
				if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
					t.Fatalf("crash point %d: verify after the cut passed the leftover: %v %+v", i, err, rep.Failures)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
