package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// An index that is lost, behind or ahead of the segments.

func TestIndexLostOrStale(t *testing.T) {
	ctx := context.Background()
	opts := Options{SegmentSize: 4096}
	build := func(t *testing.T, mem *vfs.MemFS, acks *ackLog, n int, tag string) {
		db := mustOpen(t, mem, opts)
		if err := workload(ctx, db, 3, n, acks); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			e := Entry{Anchor: "stale/" + tag, Type: segment.TypePut, Key: []byte(fmt.Sprintf("key-%d", i%4)), Value: bytes.Repeat([]byte(tag), 150)}
			r, err := db.Append(ctx, e)
			if err != nil {
				t.Fatal(err)
			}
			acks.add(e, r)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("deleted", func(t *testing.T) {
		mem := vfs.NewMem()
		acks := &ackLog{}
		build(t, mem, acks, 20, "a")
		if err := mem.RemoveAll("db/" + IndexDir); err != nil {
			t.Fatal(err)
		}
		db := mustOpen(t, mem, opts)
		defer db.Close()
		if !db.RecoveryReport().Rebuilt {
			t.Errorf("open after the index was deleted: RecoveryReport().Rebuilt is false: %+v", db.RecoveryReport())
		}
		checkDB(t, db, acks.snapshot())
		if _, err := db.Put(ctx, "stale/a", []byte("after"), []byte("rebuild")); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("behind", func(t *testing.T) {
		// An older copy of the index (from a clean close) restored over a
		// newer one: the segments hold records it has never heard of.
		mem := vfs.NewMem()
		acks := &ackLog{}
		build(t, mem, acks, 10, "a")
		old := vfs.NewMem()
		if err := testutil.CopyTree(mem, "db/"+IndexDir, old, "index"); err != nil {
			t.Fatal(err)
		}
		build(t, mem, acks, 12, "b")
		if err := mem.RemoveAll("db/" + IndexDir); err != nil {
			t.Fatal(err)
		}
		if err := testutil.CopyTree(old, "index", mem, "db/"+IndexDir); err != nil {
			t.Fatal(err)
		}

		db, err := Open("db", Options{FS: mem, SegmentSize: 4096})
		if err != nil {
			if CodeOf(err) == "" {
				t.Fatalf("open with a stale index: uncoded error %v", err)
			}
			t.Logf("open with a stale index refused: %v", err)
			return // reported, not served: acceptable
		}
		defer db.Close()
		// Adopted: every acknowledged record, old and new, is served from
		// its segment, and Get sees the newest versions.
		checkDB(t, db, acks.snapshot())
		// And the log continues where the segments end, not where the old
		// index did.
		r, err := db.Put(ctx, "stale/a", []byte("next"), []byte("v"))
		if err != nil {
			t.Fatal(err)
		}
		all := acks.snapshot()
		var last uint64
		for _, a := range all {
			if a.Receipt.Anchor == "stale/a" {
				last = max(last, a.Seq)
			}
		}
		if r.Seq != last+1 {
			t.Errorf("append after a stale index got seq %d; the segments end at %d", r.Seq, last)
		}
		checkDB(t, db, append(all, ackedEntry{Receipt: r}))
	})

	t.Run("behind, copied while open", func(t *testing.T) {
		// An older copy taken while the database was open (so it is not
		// marked clean), restored after the journal files past its settle
		// point were dropped: the records settled in between are in the
		// segments only. They must be adopted, not cut as a torn tail.
		mem := vfs.NewMem()
		acks := &ackLog{}
		db := mustOpen(t, mem, opts)
		if err := workload(ctx, db, 3, 10, acks); err != nil {
			t.Fatal(err)
		}
		if err := db.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		old := vfs.NewMem()
		if err := testutil.CopyTree(mem, "db/"+IndexDir, old, "index"); err != nil {
			t.Fatal(err)
		}
		if err := workload(ctx, db, 3, 10, acks); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		build(t, mem, acks, 12, "b")
		if err := mem.RemoveAll("db/" + IndexDir); err != nil {
			t.Fatal(err)
		}
		if err := testutil.CopyTree(old, "index", mem, "db/"+IndexDir); err != nil {
			t.Fatal(err)
		}

		db, err := Open("db", Options{FS: mem, SegmentSize: 4096})
		if err != nil {
			t.Fatalf("open with an older unclean index: %v", err)
		}
		defer db.Close()
		stale := false
		for _, ev := range db.RecoveryReport().Events {
			if ev.Kind == EventDamaged || ev.Kind == EventCut {
				t.Errorf("recovery behind an older index reported %s: %+v", ev.Kind, ev)
			}
			stale = stale || ev.Kind == EventStaleIndex
		}
		if !stale {
			t.Errorf("an index older than every journal file was not called stale: %+v", db.RecoveryReport().Events)
		}
		checkDB(t, db, acks.snapshot())
	})

	t.Run("behind, copied while open, damage past its end", func(t *testing.T) {
		// The same older unclean copy, and a frame in the middle of what it
		// never indexed is damaged. Those records were settled long ago and
		// their journal dropped: the damage is reported, never cut as a
		// torn tail with the settled records after it.
		mem := vfs.NewMem()
		db := mustOpen(t, mem, opts)
		put := func(db *DB, anchor string, n int) {
			for i := 0; i < n; i++ {
				if _, err := db.Put(ctx, anchor, []byte(fmt.Sprintf("k%d", i)), bytes.Repeat([]byte("v"), 60)); err != nil {
					t.Fatal(err)
				}
			}
		}
		put(db, "x", 3)
		if err := db.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		old := vfs.NewMem()
		if err := testutil.CopyTree(mem, "db/"+IndexDir, old, "index"); err != nil {
			t.Fatal(err)
		}
		put(db, "x", 20)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		db = mustOpen(t, mem, opts)
		put(db, "y", 5)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if err := mem.RemoveAll("db/" + IndexDir); err != nil {
			t.Fatal(err)
		}
		if err := testutil.CopyTree(old, "index", mem, "db/"+IndexDir); err != nil {
			t.Fatal(err)
		}
		segs := testutil.SegmentFiles(t, mem, "db", "x")
		newest := segs[len(segs)-1]
		_, offs, _ := frames(t, mem, newest)
		if len(offs) < 6 {
			t.Fatalf("x's newest segment holds %d records", len(offs))
		}
		hit := offs[len(offs)-3] + 20
		patchFile(t, mem, newest, func(b []byte) []byte { b[hit] ^= 0xFF; return b })
		size := fileSize(t, mem, newest)

		db, err := Open("db", Options{FS: mem, SegmentSize: 4096})
		if err != nil {
			if CodeOf(err) == "" {
				t.Fatalf("open: uncoded error %v", err)
			}
			t.Logf("open refused: %v", err)
		} else {
			defer db.Close()
			damaged := false
			for _, ev := range db.RecoveryReport().Events {
				if ev.Kind == EventCut {
					t.Errorf("damage behind an older index was cut as a torn tail: %+v", ev)
				}
				damaged = damaged || ev.Kind == EventDamaged && ev.Anchor == "x"
			}
			if !damaged {
				t.Errorf("the damaged frame was not reported: %+v", db.RecoveryReport().Events)
			}
		}
		if got := fileSize(t, mem, newest); got != size {
			t.Fatalf("x's newest segment went from %d to %d bytes", size, got)
		}
	})

	t.Run("ahead", func(t *testing.T) {
		// The index knows records that the segments no longer hold (the
		// newest segment of an anchor lost its last records): never serve
		// them, never build on the hole.
		mem := vfs.NewMem()
		acks := &ackLog{}
		build(t, mem, acks, 10, "a")
		segs := testutil.SegmentFiles(t, mem, "db", "stale/a")
		last := segs[len(segs)-1]
		_, offs, _ := frames(t, mem, last)
		if len(offs) < 2 {
			t.Fatalf("newest segment holds %d records", len(offs))
		}
		cut := offs[len(offs)-2]
		patchFile(t, mem, last, func(b []byte) []byte { return b[:cut] })
		var head uint64
		for _, a := range acks.snapshot() {
			if a.Receipt.Anchor == "stale/a" {
				head = max(head, a.Seq)
			}
		}
		db, err := Open("db", Options{FS: mem, SegmentSize: 4096})
		if err != nil {
			if CodeOf(err) == "" {
				t.Fatalf("open with an index ahead of the segments: uncoded error %v", err)
			}
			t.Logf("open refused: %v", err)
			return
		}
		defer db.Close()
		for seq := head - 1; seq <= head; seq++ {
			if rec, err := db.Record(ctx, "stale/a", seq); err == nil {
				t.Fatalf("record %d is served (%s) but no segment holds it", seq, rec.Hash)
			} else if !IsCorruption(err) && !errors.Is(err, ErrDependencyMissing) {
				t.Errorf("record %d: want INT_* or STATE_003, got %v", seq, err)
			}
		}
		// A write must not land after a hole, leaving a segment no scanner
		// can read: refused, or written where the records really end.
		r, err := db.Put(ctx, "stale/a", []byte("after"), []byte("hole"))
		if err != nil {
			if CodeOf(err) == "" {
				t.Fatalf("write after the hole: uncoded error %v", err)
			}
			return
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		segs = testutil.SegmentFiles(t, mem, "db", "stale/a")
		if err := scanError(mem, segs[len(segs)-1]); err != nil {
			t.Fatalf("append %+v after the index ran ahead left a segment that does not scan: %v", r, err)
		}
	})
}

func fileSize(t testing.TB, fs vfs.FS, path string) int64 {
	t.Helper()
	st, err := fs.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestStaleIndexCatchesUpTheAuditHead: an older copy of the index records
// an older head of the audit log. The lines after it are the database's
// own (the log still holds the copy's head), so recovery adopts the log's
// head; until stop 20 every later audited action (a snapshot, a
// compaction) was refused with INT_002 until rebuild-index.
func TestStaleIndexCatchesUpTheAuditHead(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	opts := Options{FS: mem, SegmentSize: 4096}
	session := func() {
		db, err := Open("db", opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
			t.Fatal(err)
		}
		if _, err := db.CreateSnapshot(ctx, ""); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	session()
	old := vfs.NewMem()
	if err := testutil.CopyTree(mem, "db/"+IndexDir, old, "index"); err != nil {
		t.Fatal(err)
	}
	session()
	if err := mem.RemoveAll("db/" + IndexDir); err != nil {
		t.Fatal(err)
	}
	if err := testutil.CopyTree(old, "index", mem, "db/"+IndexDir); err != nil {
		t.Fatal(err)
	}

	db, err := Open("db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.CreateSnapshot(ctx, ""); err != nil {
		t.Fatalf("snapshot after an older index was restored: %v", err)
	}
	head, err := db.VerifyAuditLog(ctx)
	if err != nil || head.Lines != 3 {
		t.Fatalf("audit log: %d lines, %v; want 3 and no error", head.Lines, err)
	}
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep.Failures, err)
	}
}
