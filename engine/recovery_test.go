package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// Recovery after a process kill, a power loss, or one after the other:
// every acknowledged append survives, and recovery cuts only a torn tail.

// A process kill leaves a segment created since the last settle (and, for a
// new anchor, its directory) in the page cache: file data and directory
// entries alike unsynced. Recovery finds the file intact, so journal replay
// rewrites nothing, and reconciliation adopts its records; it must fsync the
// file and the directories naming it before Open drops the journal that held
// the records. Otherwise a power loss after that Open (or after a clean
// Close of it) takes the directory entries, and with them records the index
// vouches for: acknowledged appends lost, the anchor reported damaged
// (CONTRACT §3: an acknowledged append is never lost by a crash at any
// point, and no record is ever indexed that is not in a segment).
func TestKillThenPowerLossAfterRecoveryKeepsNewSegments(t *testing.T) {
	for _, closeFirst := range []bool{false, true} {
		for _, noSync := range []bool{false, true} {
			t.Run(fmt.Sprintf("close=%v/noSync=%v", closeFirst, noSync), func(t *testing.T) {
				ctx := context.Background()
				mem := vfs.NewCrashableMem()
				opts := Options{FS: mem, SegmentSize: 1024, SettleInterval: time.Hour, SettleBytes: 1 << 30, NoSync: noSync}
				db, err := Open("db", opts)
				if err != nil {
					t.Fatal(err)
				}
				// Anchor "old" is settled; its later appends open a new
				// segment after the settle. Anchor "new" is created after it.
				for i := 0; i < 3; i++ {
					if _, err := db.Append(ctx, Entry{Anchor: "old", Type: segment.TypePut, Key: []byte(fmt.Sprint("s", i)), Value: []byte("v")}); err != nil {
						t.Fatal(err)
					}
				}
				if err := db.Sync(context.Background()); err != nil {
					t.Fatal(err)
				}
				var acked []Receipt
				for i := 0; i < 12; i++ {
					for _, anchor := range []string{"old", "new"} {
						r, err := db.Append(ctx, Entry{Anchor: anchor, Type: segment.TypePut, Key: []byte(fmt.Sprint("k", i)), Value: make([]byte, 100)})
						if err != nil {
							t.Fatal(err)
						}
						acked = append(acked, r)
					}
				}
				// Reading writes the buffered bytes out: in the page cache.
				for _, r := range acked {
					if _, err := db.Record(ctx, r.Anchor, r.Seq); err != nil {
						t.Fatal(err)
					}
				}
				killDB(t, db)

				db, err = Open("db", opts)
				if err != nil {
					t.Fatalf("open after kill: %v", err)
				}
				if closeFirst {
					if err := db.Close(); err != nil {
						t.Fatal(err)
					}
				}
				crashed := testutil.CrashClone(mem, vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
				if !closeFirst {
					killDB(t, db)
				}
				db2, err := Open("db", Options{FS: crashed, SegmentSize: 1024})
				if err != nil {
					t.Fatalf("open after power loss: %v", err)
				}
				defer db2.Close()
				checkRecovered(t, db2, acked)
			})
		}
	}
}

// TestKillThenCrashDuringRecovery kills a process (every written byte stays,
// unsynced, in the page cache) after each of n appends, for every n, then
// crashes the recovery that follows at each of its writes and right after it
// returns, keeping only what was synced. The crash tests elsewhere start
// recovery from a crash clone, in which every byte that survived counts as
// synced; here recovery starts from a kill, and must itself make durable
// whatever it vouches for, before it drops the journal. Every acknowledged
// durable append must survive, and once the recovery has returned, every
// NoSync one too (CONTRACT §3; docs/RELIABILITY.md: a process kill loses
// nothing acknowledged in either mode).
func TestKillThenCrashDuringRecovery(t *testing.T) {
	maxN := 24
	step := 1
	switch {
	case testutil.RaceEnabled:
		step = 5 // make test's pass without the detector takes every n
	case testing.Short():
		step = 3
	}
	for _, noSync := range []bool{false, true} {
		for n := 1; n <= maxN; n += step {
			ctx := context.Background()
			mem := vfs.NewCrashableMem()
			db, err := Open("db", crashOptions(mem, noSync))
			if err != nil {
				t.Fatal(err)
			}
			acks := &ackLog{}
			if err := workload(ctx, db, 1, n, acks); err != nil {
				t.Fatal(err)
			}
			acked := acks.snapshot()
			if n%2 == 1 {
				// Reads write the buffered segment bytes to the files.
				for _, a := range acked {
					if _, err := db.Record(ctx, a.Receipt.Anchor, a.Seq); err != nil {
						t.Fatal(err)
					}
				}
			}
			killQuiesced(t, db)

			cc := newCloneEveryWrite(mem, 0, uint64(n), 1)
			db, err = Open("db", crashOptions(errorfs.Wrap(testutil.LockOrdered(mem), cc), noSync))
			if err != nil {
				t.Fatalf("n=%d noSync=%v: open after kill: %v", n, noSync, err)
			}
			clones := append(cc.take(), testutil.CrashClone(mem, vfs.CrashCloneCfg{}))
			killQuiesced(t, db)
			for i, fs := range clones {
				what := fmt.Sprintf("n=%d noSync=%v: kill, then power loss at write %d of %d of recovery", n, noSync, i+1, len(clones))
				db, err := Open("db", crashOptions(fs, noSync))
				if err != nil {
					t.Fatalf("%s: open: %v", what, err)
				}
				for _, ev := range db.RecoveryReport().Events {
					if ev.Kind == EventDamaged {
						t.Fatalf("%s: damage: %v", what, ev)
					}
				}
				want := acked
				if noSync && i < len(clones)-1 {
					// A power loss before recovery made them durable may
					// take NoSync appends (the kill did not).
					want = nil
				}
				checkDB(t, db, want)
				if i == len(clones)-1 {
					if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
						t.Fatalf("%s: verify: %v %+v", what, err, rep.Failures)
					}
				}
				if err := db.Close(); err != nil {
					t.Fatalf("%s: close: %v", what, err)
				}
			}
		}
	}
}

// A seal is written, then fsynced, by the applier after the journal block
// that decided it (with the next segment's first record) is durable. When
// that journal block is the first after a settle, recovery checks the seal
// in restorePreviousSeal. After a process kill between the seal's write and
// its fsync (here: the fsync fails, then the process is killed), an intact
// seal may be in the page cache only, so recovery makes it durable before it
// drops the journal. Otherwise a power loss takes the seal: the sealed
// segment reads as unsealed with a newer one after it, damage, and the
// acknowledged append in the next segment is unreadable (CONTRACT §3).
func TestKillBeforeSealSyncThenPowerLoss(t *testing.T) {
	ctx := context.Background()
	const an = "seal"
	opts := Options{SegmentSize: 1024, SettleBytes: 1 << 30, SettleInterval: time.Hour}
	mem := vfs.NewCrashableMem()
	seg1 := mem.PathJoin(segmentAnchorDir(mem, "db", an), segmentFileName(1))
	var armed atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !armed.Load() || op.Path != seg1 {
			return nil
		}
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			return errors.New("injected: the process dies before this fsync")
		}
		return nil
	})
	db := mustOpen(t, errorfs.Wrap(testutil.LockOrdered(mem), inj), opts)
	var acked []Receipt
	i := 0
	appendOne := func() anchorHead {
		t.Helper()
		e := Entry{Anchor: an, Type: segment.TypePut, Key: []byte(fmt.Sprint("k", i)), Value: bytes.Repeat([]byte{'v'}, 100)}
		i++
		r, st, err := appendVisible(ctx, db, e)
		if err != nil {
			t.Fatal(err)
		}
		acked = append(acked, r)
		return st
	}
	st := appendOne()
	frame := st.segSize - int64(segment.HeaderSize(an))
	for st.segSize+frame <= opts.SegmentSize {
		st = appendOne()
	}
	// Segment 1 is full: settle, so the next journal block, which seals it
	// and starts segment 2, is the first the journal holds.
	if err := db.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	r, err := db.Append(ctx, Entry{Anchor: an, Type: segment.TypePut, Key: []byte("next"), Value: bytes.Repeat([]byte{'v'}, 100)})
	if err != nil {
		t.Fatalf("append that seals segment 1: %v", err)
	}
	acked = append(acked, r)
	if r.Seq != uint64(i+1) {
		t.Fatalf("seq %d, want %d", r.Seq, i+1)
	}
	for db.failed.Load() == nil {
		time.Sleep(time.Millisecond) // the applier meets the failed seal fsync
	}
	killDB(t, db)

	opts.FS = mem
	db, err = Open("db", opts)
	if err != nil {
		t.Fatalf("open after kill: %v", err)
	}
	t.Logf("recovery after the kill: %v", db.RecoveryReport().Events)
	crashed := testutil.CrashClone(mem, vfs.CrashCloneCfg{})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open("db", Options{FS: crashed, SegmentSize: 1024})
	if err != nil {
		t.Fatalf("open after power loss: %v", err)
	}
	defer db.Close()
	checkRecovered(t, db, acked)
}

// checkRecovered checks a database reopened after a kill and a power loss:
// recovery reported no damage, checkDB holds with every receipt of acked,
// and Verify finds nothing.
func checkRecovered(t *testing.T, db *DB, acked []Receipt) {
	t.Helper()
	for _, ev := range db.RecoveryReport().Events {
		if ev.Kind == EventDamaged {
			t.Errorf("damage after kill, recovery and power loss: %v", ev)
		}
	}
	entries := make([]ackedEntry, len(acked))
	for i, r := range acked {
		entries[i].Receipt = r
	}
	checkDB(t, db, entries)
	if rep, err := db.Verify(context.Background(), VerifyOptions{}); err != nil || !rep.OK {
		t.Errorf("verify: %v %+v", err, rep.Failures)
	}
}

// An index restored from an older copy (stale_index) vouches for less than
// was settled: the records past its end were acknowledged, settled into
// their segment, and their journal dropped long ago. A frame damaged there
// (a bit flip) with whole records after it is damage in the middle of the
// log, as it is for a rebuild: recovery reports it and does not cut it and
// every record after it as a torn tail, which would lose acknowledged
// records (CONTRACT §3: damage anywhere but a torn tail is never repaired;
// it is reported and the anchor read-only).
func TestStaleIndexDoesNotCutSettledRecordsAfterDamage(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	opts := Options{FS: mem, SegmentSize: 1 << 20}
	db := mustOpen(t, mem, opts)
	var acked []Receipt
	put := func(n int) {
		for i := 0; i < n; i++ {
			r, err := db.Append(ctx, Entry{Anchor: "a", Type: segment.TypePut, Key: []byte(fmt.Sprint("k", len(acked))), Value: bytes.Repeat([]byte{'v'}, 50)})
			if err != nil {
				t.Fatal(err)
			}
			acked = append(acked, r)
		}
	}
	put(3)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	old := vfs.NewMem()
	if err := testutil.CopyTree(mem, "db/"+IndexDir, old, "index"); err != nil {
		t.Fatal(err)
	}
	db = mustOpen(t, mem, opts)
	put(7)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The older index comes back, and a bit of record 5's value flips.
	if err := mem.RemoveAll("db/" + IndexDir); err != nil {
		t.Fatal(err)
	}
	if err := testutil.CopyTree(old, "index", mem, "db/"+IndexDir); err != nil {
		t.Fatal(err)
	}
	segs := testutil.SegmentFiles(t, mem, "db", "a")
	seg := segs[len(segs)-1]
	_, offs, _ := frames(t, mem, seg)
	data, err := testutil.ReadFile(mem, seg)
	if err != nil {
		t.Fatal(err)
	}
	data[offs[4]+40] ^= 1
	testutil.WriteFile(mem, seg, data)

	db, err = Open("db", opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer db.Close()
	rep := db.RecoveryReport()
	damaged := false
	for _, ev := range rep.Events {
		if ev.Kind == EventCut {
			t.Errorf("settled records after a damaged frame were cut: %v", ev)
		}
		damaged = damaged || ev.Kind == EventDamaged
	}
	if !damaged {
		t.Errorf("the damaged frame was not reported: %v", rep.Events)
	}
	if _, err := db.Append(ctx, Entry{Anchor: "a", Type: segment.TypePut, Key: []byte("x"), Value: []byte("y")}); err == nil {
		t.Errorf("an append to the damaged anchor was accepted")
	}
	after, err := testutil.ReadFile(mem, seg)
	if err != nil || !bytes.Equal(after, data) {
		t.Errorf("the damaged segment was rewritten (%d bytes, was %d): %v", len(after), len(data), err)
	}
	// What the old index vouched for, and the whole record after it, is
	// still served.
	for _, r := range acked[:4] {
		if rec, err := db.Record(ctx, r.Anchor, r.Seq); err != nil || rec.Hash != r.Hash {
			t.Errorf("seq %d: %v", r.Seq, err)
		}
	}
}

// An anchor whose only segment has lost its header (it is shorter than one)
// while the index has settled records in it is damaged, and its files stay
// as they are for an operator (docs/RELIABILITY.md: nothing of a damaged
// anchor is rewritten or removed). Reconciliation must not take the
// headerless file for a torn creation and remove it before it knows the
// anchor (and then report the anchor's segments missing).
func TestHeaderlessOnlySegmentOfIndexedAnchorIsKept(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	opts := Options{FS: mem}
	db := mustOpen(t, mem, opts)
	for i := 0; i < 3; i++ {
		if _, err := db.Append(ctx, Entry{Anchor: "h", Type: segment.TypePut, Key: []byte(fmt.Sprint("k", i)), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	killDB(t, db) // unclean: the next Open reconciles
	seg := testutil.SegmentFiles(t, mem, "db", "h")[0]
	data, err := testutil.ReadFile(mem, seg)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WriteFile(mem, seg, data[:10])

	db, err = Open("db", opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer db.Close()
	damaged := false
	for _, ev := range db.RecoveryReport().Events {
		if ev.Kind == EventRemoved {
			t.Errorf("the segment of an anchor the index has records in was removed: %v", ev)
		}
		damaged = damaged || (ev.Kind == EventDamaged && ev.Anchor == "h")
	}
	if !damaged {
		t.Errorf("the anchor is not reported damaged: %v", db.RecoveryReport().Events)
	}
	if got, err := testutil.ReadFile(mem, seg); err != nil || !bytes.Equal(got, data[:10]) {
		t.Errorf("the damaged anchor's segment changed: %q %v", got, err)
	}
}

// killQuiesced is killDB once the settle loop has stopped and the applier has
// applied every group: killDB closes the index, which a settle or an apply
// still running would then use (a panic no real kill can cause). What the
// kill leaves is the same as at any moment the engine is between groups.
func killQuiesced(t *testing.T, db *DB) {
	t.Helper()
	close(db.stopBg)
	db.settler.Wait()
	if err := db.commit.awaitVisible(context.Background()); err != nil {
		t.Fatal(err)
	}
	killDB(t, db)
}

// Compaction truncates sealed segments while the journal since the last
// settle may still hold frames of them, or the group that sealed them. After
// a crash right after (even a process kill, every byte intact), journal
// replay must neither look for the removed segment nor recreate it empty,
// and must not report the anchor damaged: a crash at any moment of a
// compaction leaves a database that opens and verifies (CONTRACT §6).
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

// Process kill, then rebuild-index [--from-snapshot] --apply, then a power
// loss: every acknowledged append survives. The rebuild (from a snapshot
// too) indexes the unsettled tail, so it must make the tail durable before
// Open deletes the journal that held it.
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
