package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Regression tests for what a review of recovery found (stop 10).

// Compaction truncates sealed segments while the journal since the last
// settle may still hold frames of them, or the group that sealed them. A
// crash right after — even a process kill, every byte intact — made journal
// replay look for the removed segment (or recreate it empty) and report the
// anchor damaged. SPEC §6: a crash at any moment of a compaction leaves a
// database that opens and verifies.
func TestCrashAfterCompactionWithUnsettledJournal(t *testing.T) {
	for _, settleAfter := range []int{6, 4} {
		// 5 records fill a 1 KiB segment. settleAfter=6: the journal starts
		// inside segment 2. settleAfter=4: it starts with the first record
		// of segment 2, whose group sealed segment 1.
		t.Run(fmt.Sprintf("settleAfter=%d", settleAfter), func(t *testing.T) {
			ctx := context.Background()
			mem := vfs.NewCrashableMem()
			db, err := Open("db", Options{FS: mem, SegmentSize: 1024, SettleBytes: 1 << 30, SettleInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 40; i++ {
				if _, err := db.Append(ctx, Entry{Anchor: "a", Type: segment.TypePut, Key: []byte(fmt.Sprint("k", i%5)), Value: bytes.Repeat([]byte("v"), 60)}); err != nil {
					t.Fatal(err)
				}
				if i == settleAfter {
					if err := db.Sync(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
			}
			policy := snapshot.Policy{Version: "v1", Snapshot: snapshot.Triggers{EveryRecords: 1},
				KeepSnapshots: 1, RawLog: "truncate", VerifyBeforeDelete: true}
			// The first pass takes a snapshot, the second removes the sealed
			// segments wholly below it. Nothing settles in between.
			if _, err := coveredCompact(t, db, policy, CompactOptions{Apply: true}); err != nil {
				t.Fatal(err)
			}
			res, err := coveredCompact(t, db, policy, CompactOptions{Apply: true})
			if err != nil || res.RemovedBytes == 0 {
				t.Fatalf("compact: %+v %v", res, err)
			}
			crashed := testutil.CrashClone(mem, vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, 2))})
			_ = db.Close()

			db2, err := Open("db", Options{FS: crashed, SegmentSize: 1024})
			if err != nil {
				t.Fatalf("open after crash: %v", err)
			}
			defer db2.Close()
			for _, ev := range db2.RecoveryReport().Events {
				if ev.Kind == EventDamaged {
					t.Errorf("a crash after compaction left damage: %v", ev)
				}
			}
			if _, err := db2.Append(ctx, Entry{Anchor: "a", Type: segment.TypePut, Key: []byte("after"), Value: []byte("x")}); err != nil {
				t.Errorf("append after recovery: %v", err)
			}
			if rep, err := db2.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
				t.Errorf("verify after crash: %v %+v", err, rep.Failures)
			}
		})
	}
}

// killDB abandons db as a SIGKILL would: nothing is flushed or synced; the
// lock and the index (no WAL: its memtable is dropped) are released so the
// same MemFS can be opened again. Bytes written to files stay, unsynced.
func killDB(t *testing.T, db *DB) {
	t.Helper()
	db.fail(errors.New("simulated kill"))
	if err := db.index.Close(); err != nil {
		t.Logf("close the killed database's index: %v", err)
	}
	_ = db.lock.Close()
}

// Process kill, then rebuild-index [--from-snapshot] --apply, then a power
// loss: every acknowledged append must survive. The rebuild from a snapshot
// indexed the unsettled tail without fsyncing it and let Open delete the
// journal that held it.
func TestRebuildAfterKillThenPowerLoss(t *testing.T) {
	for _, fromSnapshot := range []bool{false, true} {
		t.Run(fmt.Sprintf("fromSnapshot=%v", fromSnapshot), func(t *testing.T) {
			ctx := context.Background()
			mem := vfs.NewCrashableMem()
			opts := Options{FS: mem, SettleInterval: time.Hour, SettleBytes: 1 << 30}
			db, err := Open("db", opts)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 3; i++ {
				if _, err := db.Append(ctx, Entry{Anchor: "a", Type: segment.TypePut, Key: []byte(fmt.Sprint("s", i)), Value: []byte("v")}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := db.CreateSnapshot(ctx, ""); err != nil {
				t.Fatal(err)
			}
			if err := db.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			var acked []Receipt
			for i := 0; i < 5; i++ {
				r, err := db.Append(ctx, Entry{Anchor: "a", Type: segment.TypePut, Key: []byte(fmt.Sprint("k", i)), Value: []byte("v")})
				if err != nil {
					t.Fatal(err)
				}
				acked = append(acked, r)
			}
			// Reading writes the buffered segment bytes to the file: in the
			// page cache, not fsynced.
			for _, r := range acked {
				if _, err := db.Record(ctx, r.Anchor, r.Seq); err != nil {
					t.Fatal(err)
				}
			}
			killDB(t, db)
			if _, err := RebuildIndexWith(ctx, "db", opts, RebuildOptions{Apply: true, FromSnapshot: fromSnapshot}); err != nil {
				t.Fatalf("rebuild-index: %v", err)
			}
			crashed := testutil.CrashClone(mem, vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
			db2, err := Open("db", Options{FS: crashed})
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer db2.Close()
			for _, r := range acked {
				if _, err := db2.Record(ctx, r.Anchor, r.Seq); err != nil {
					t.Errorf("acknowledged seq %d lost: %v", r.Seq, err)
				}
			}
			if rep, err := db2.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
				t.Errorf("verify: %v %+v", err, rep.Failures)
			}
		})
	}
}

// After a crash, recovery moves the Lamport clock past every anchor's last
// counter (the clock is persisted only at settles). An anchor recovery found
// damaged returned early and never raised it, so a new local write got a
// counter below records already held and lost, in merged order, to an older
// put of the same key (SPEC §1: counter = max(last counter of this anchor,
// highest counter the database has seen) + 1).
func TestDamagedAnchorStillAdvancesTheClock(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	db, err := Open("db", Options{FS: mem, SegmentSize: 1024, SettleBytes: 1 << 30, SettleInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if _, err := db.Append(ctx, Entry{Anchor: "a", Type: segment.TypePut, Key: []byte("k"), Value: bytes.Repeat([]byte{'a' + byte(i)}, 60)}); err != nil {
			t.Fatal(err)
		}
		if i == 12 {
			if err := db.Sync(context.Background()); err != nil { // the clock is persisted here; segment 1 sealed and settled
				t.Fatal(err)
			}
		}
	}
	// A flush of the index between settles: it now holds counters above the
	// persisted clock.
	if _, err := db.Compact(ctx, snapshot.DefaultPolicy(), CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	crashed := testutil.CrashClone(mem, vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, 2))})
	_ = db.Close()
	// A bit flip in the seal of anchor a's first (sealed) segment: damage.
	seg1 := crashed.PathJoin(segment.AnchorDir(crashed, "db", "a"), segment.FileName(1))
	f, err := crashed.OpenReadWrite(seg1, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	b := make([]byte, 1)
	_, _ = f.ReadAt(b, st.Size()-1)
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, st.Size()-1); err != nil {
		t.Fatal(err)
	}
	_ = f.Sync()
	_ = f.Close()

	db2, err := Open("db", Options{FS: crashed, SegmentSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	info, _, err := db2.AnchorInfo(context.Background(), "a")
	if err != nil || info.Damage == "" {
		t.Fatalf("anchor a should be damaged: %+v %v", info, err)
	}
	r, err := db2.Append(ctx, Entry{Anchor: "b", Type: segment.TypePut, Key: []byte("k"), Value: []byte("newest")})
	if err != nil {
		t.Fatal(err)
	}
	if r.Counter <= info.LastCounter {
		t.Errorf("new append got counter %d; the database already holds counter %d (anchor a)", r.Counter, info.LastCounter)
	}
	if v, err := db2.Get(ctx, []byte("k")); err != nil || string(v.Value) != "newest" {
		t.Errorf("Get right after an acknowledged put = %s seq %d, %v; want b's value", v.Anchor, v.Seq, err)
	}
}
