package engine

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/journal"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestCrashNoSyncEmptySegmentBeforeJournalHole: the crash state TestCrashNoSync
// met once. A NoSync session is settling: the settle has rotated the journal
// and is about to write out segment N, created since the last settle, and
// an append has already journaled, in the new journal file, the seal of N
// and the first record of N+1. Power fails before the journal fdatasync
// that precedes N's write (segsync.go). Every unsynced block or directory
// entry survives or not independently: the old journal file loses its
// unsynced blocks (N's records), the new one keeps its block, and N is
// missing. Before segsync.go N could be written ahead of its journal
// blocks, and its directory entry survive with none of its data (a 0-byte
// file) or with a torn tail: a database an older engine left so is opened
// by this one, so those states are built by hand here too. No index row
// vouches for anything in N, so what is left of it is a crash's leftover:
// recovery reports the journal's hole and removes or cuts the leftover,
// and never calls it damage (SPEC §3).
func TestCrashNoSyncEmptySegmentBeforeJournalHole(t *testing.T) {
	for _, settledBefore := range []bool{false, true} {
		for _, left := range []string{"empty", "missing", "torn"} {
			t.Run(fmt.Sprintf("settledBefore=%v/%s", settledBefore, left), func(t *testing.T) {
				testCrashNoSyncEmptySegment(t, settledBefore, left)
			})
		}
	}
	// The same loss where the index vouches for records in N is damage.
	t.Run("settled records lost", func(t *testing.T) {
		testCrashNoSyncEmptySegment(t, true, "settled-empty")
	})
}

// testCrashNoSyncEmptySegment builds the crash state. settledBefore: N
// is 3, and segments 1 and 2 (sealed, fsynced) were settled into the index
// part way through segment 2; otherwise N is 1 and the index has nothing of
// the anchor. left is what the crash left of N: "empty", "missing", or
// "torn" (its header, one frame and part of the next); "settled-empty" is
// N empty after a settle that made its first record durable and indexed it:
// not a crash's leftover but damage.
func testCrashNoSyncEmptySegment(t *testing.T, settledBefore bool, left string) {
	ctx := context.Background()
	const an = "hole"
	opts := Options{SegmentSize: 1024, SettleBytes: 1 << 30, SettleInterval: time.Hour, NoSync: true}
	mem := vfs.NewCrashableMem()
	segDir := segmentAnchorDir(mem, "db", an)
	// Segment N: the first one not settled before the crash.
	n := uint64(1)
	if settledBefore {
		n = 3
	}
	segN := mem.PathJoin(segDir, segmentFileName(n))

	var armed atomic.Bool
	var syncs, writes atomic.Int32
	blocked, release := make(chan struct{}), make(chan struct{})
	var durable, kept *vfs.MemFS
	jdir := mem.PathJoin("db", JournalDir)
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !armed.Load() {
			return nil
		}
		if mem.PathDir(op.Path) == jdir && durable == nil {
			switch op.Kind {
			case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
				// The journal fdatasync before N is written out: the
				// power fails just before it.
				durable = testutil.CrashClone(mem, vfs.CrashCloneCfg{})
			}
			return nil
		}
		if op.Path != segN {
			return nil
		}
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			// The settler's fsync of N: hold it until the crash is taken.
			if syncs.Add(1) == 1 {
				close(blocked)
				<-release
			}
		case errorfs.OpFileWrite, errorfs.OpFileWriteAt:
			// The settle writes N out first; the next write of N is its
			// seal, made once the journal block holding the seal and N+1's
			// first record is out: the power fails here.
			if writes.Add(1) == 2 {
				kept = testutil.CrashClone(mem, vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: newRand(1)})
			}
		}
		return nil
	})
	db := mustOpen(t, errorfs.Wrap(testutil.LockOrdered(mem), inj), opts)
	i := 0
	appendOne := func() anchorHead {
		t.Helper()
		e := Entry{Anchor: an, Type: segment.TypePut, Key: []byte(fmt.Sprint("k", i%10)), Value: bytes.Repeat([]byte{'v'}, 100)}
		i++
		_, st, err := appendVisible(ctx, db, e)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	first := appendOne()
	frame := first.segSize - int64(segment.HeaderSize(an)) // every record is this size
	// fill appends to segment segno until the next record would seal it.
	fill := func(st anchorHead, segno uint64) {
		for st.segno != segno || st.segSize+frame <= opts.SegmentSize {
			st = appendOne()
		}
	}
	if settledBefore {
		// Segment 1 sealed and segment 2 started, settled; segment 2 filled
		// and sealed (fsynced), and N started after the settle.
		fill(first, 1)
		if st := appendOne(); st.segno != 2 {
			t.Fatalf("segment %d active, want 2", st.segno)
		}
		if err := db.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		fill(appendOne(), 2)
		first = appendOne()
		if first.segno != n {
			t.Fatalf("segment %d active, want %d", first.segno, n)
		}
		if left == "settled-empty" {
			if err := db.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Segment N filled up to its seal, then a settle that writes N out and
	// stops before fsyncing it.
	fill(first, n)
	armed.Store(true)
	settled := make(chan error, 1)
	go func() { settled <- db.Sync(context.Background()) }()
	<-blocked
	// The next record seals N and starts N+1: the crash is taken then.
	if st := appendOne(); st.segno != n+1 || st.segCount != 1 {
		t.Fatalf("segment %d active with %d records, want %d with 1", st.segno, st.segCount, n+1)
	}
	close(release)
	if err := <-settled; err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if durable == nil || kept == nil {
		t.Fatal("no crash state was taken")
	}

	// The crash: everything synced, plus the newest journal file's blocks
	// and what is left of N.
	crashed := durable
	if _, err := crashed.Stat(segN); (err == nil) != (left == "settled-empty") {
		t.Fatalf("%s: stat after the crash: %v", segN, err)
	}
	if left != "missing" {
		if err := crashed.MkdirAll(segDir, 0o755); err != nil {
			t.Fatal(err)
		}
		var keep []byte
		if left == "torn" {
			full, err := testutil.ReadFile(kept, segN)
			if err != nil {
				t.Fatal(err)
			}
			keep = full[:int64(segment.HeaderSize(an))+frame+10]
		}
		testutil.WriteFile(crashed, segN, keep)
	}
	gens, err := journal.List(kept, jdir)
	if err != nil || len(gens) == 0 {
		t.Fatalf("journal files: %v %v", gens, err)
	}
	newest := crashed.PathJoin(jdir, journal.FileName(slices.Max(gens)))
	data, err := testutil.ReadFile(kept, newest)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WriteFile(crashed, newest, data)

	db = mustOpen(t, crashed, opts)
	if left == "settled-empty" {
		damaged := false
		for _, ev := range db.RecoveryReport().Events {
			t.Logf("recovery: %v", ev)
			damaged = damaged || (ev.Kind == EventDamaged && ev.Anchor == an && ev.File == segN)
		}
		info, _, err := db.AnchorInfo(context.Background(), an)
		if err != nil {
			t.Fatal(err)
		}
		if !damaged || info.Damage == "" {
			t.Errorf("settled records of %s lost: want damage reported, got events %v, anchor damage %q", segN, db.RecoveryReport().Events, info.Damage)
		}
		if _, err := db.Put(ctx, an, []byte("k"), []byte("v")); !IsCorruption(err) {
			t.Errorf("write to the damaged anchor: want an INT_* refusal, got %v", err)
		}
		_ = db.Close()
		return
	}
	removed, cut, hole := false, false, false
	for _, ev := range db.RecoveryReport().Events {
		t.Logf("recovery: %v", ev)
		switch {
		case ev.Kind == EventDamaged:
			t.Errorf("recovery calls a crash's leftover damage: %v", ev)
		case ev.Kind == EventRemoved && ev.File == segN,
			// N's first record was journaled with the seal of N-1, whose
			// write synced the journal first (segsync.go): the journal
			// restores N from its start instead.
			left == "empty" && ev.Kind == EventRestored && ev.File == segN && ev.Offset == 0:
			removed = true
		case ev.Kind == EventCut && ev.File == segN:
			cut = true
		case ev.Kind == EventJournalEnd && ev.Anchor == an:
			hole = true
		}
	}
	if !hole || removed != (left == "empty") || cut != (left == "torn") {
		t.Errorf("%s segment %s: want the journal's hole reported and the leftover removed or cut; got hole=%v removed=%v cut=%v",
			left, segN, hole, removed, cut)
	}
	checkDB(t, db, nil)
	// What survived is writable and reopens clean.
	more := &ackLog{}
	if err := workload(ctx, db, 2, 6, more); err != nil {
		t.Fatalf("append after recovery: %v", err)
	}
	if _, err := db.Put(ctx, an, []byte("after"), []byte("v")); err != nil {
		t.Fatalf("append to the recovered anchor: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = mustOpen(t, crashed, opts)
	defer db.Close()
	checkDB(t, db, more.snapshot())
}
