package engine

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A rebuild starts from an empty index, so nothing vouches for any record:
// the rule that a failing frame past the index's end is a torn tail must not
// turn damage in the middle of a settled log into a cut of every record after
// it (found by a CLI audit: `rebuild-index --apply` after one byte of a
// settled record was changed cut that record and the two whole records after
// it, reported clean, and gave the next append a used seq).
func TestRebuildReportsDamageInsteadOfCuttingWholeRecords(t *testing.T) {
	ctx := context.Background()
	for _, fromSnapshot := range []bool{false, true} {
		t.Run(fmt.Sprintf("fromSnapshot=%v", fromSnapshot), func(t *testing.T) {
			fs := vfs.NewMem()
			db := mustOpen(t, fs, Options{})
			var acked []Receipt
			for i := 1; i <= 4; i++ {
				r, err := db.Put(ctx, "a", []byte(fmt.Sprintf("k%d", i)), []byte(fmt.Sprintf("value-%d", i)))
				if err != nil {
					t.Fatal(err)
				}
				acked = append(acked, r)
			}
			if fromSnapshot {
				if _, err := db.CreateSnapshot(ctx, ""); err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			seg, data := flipValueByte(t, fs, "a", "value-2")

			plan, err := RebuildIndexWith(ctx, "db", Options{FS: fs}, RebuildOptions{Apply: true, FromSnapshot: fromSnapshot})
			if err != nil {
				t.Fatal(err)
			}
			var damaged bool
			for _, ev := range plan.Report.Events {
				if ev.Kind == EventCut {
					t.Fatalf("the rebuild cut whole records: %v", ev)
				}
				damaged = damaged || (ev.Kind == EventDamaged && ev.Anchor == "a")
			}
			// A rebuild from a snapshot does not recompute the hashes of
			// records up to its frontier (fastrebuild.go): the damage is
			// left for verify, as documented. A full replay reports it and
			// makes the anchor read-only.
			if !damaged && !fromSnapshot {
				t.Fatalf("the rebuild did not report the damage: %+v", plan.Report)
			}
			after, err := testutil.ReadFile(fs, seg)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(after, data) {
				t.Fatalf("the rebuild changed the damaged segment (%d bytes, was %d)", len(after), len(data))
			}

			db = mustOpen(t, fs, Options{})
			defer db.Close()
			if _, err := db.Put(ctx, "a", []byte("k5"), []byte("v")); !fromSnapshot && errs.CodeOf(err) == "" {
				t.Fatalf("append to a damaged anchor: %v, want a refusal", err)
			}
			rep, err := db.Verify(ctx, VerifyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK {
				t.Fatal("verify passed a log with a damaged record")
			}
			// The records before the damage still read back.
			if rec, err := db.Record(ctx, "a", 1); err != nil || rec.Hash != acked[0].Hash {
				t.Fatalf("record 1 after the rebuild: %v", err)
			}
		})
	}
}

// flipValueByte changes one bit of value in anchor's first segment of the
// database "db" and returns the segment's path and its bytes as written.
func flipValueByte(t *testing.T, fs vfs.FS, anchor, value string) (string, []byte) {
	t.Helper()
	seg := testutil.SegmentFiles(t, fs, "db", anchor)[0]
	data, err := testutil.ReadFile(fs, seg)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(data, []byte(value))
	if at < 0 {
		t.Fatalf("%q not found in %s", value, seg)
	}
	data[at] ^= 0x20
	testutil.WriteFile(fs, seg, data)
	return seg, data
}

// A failing frame with nothing whole after it is still a torn tail: the
// rebuild cuts it, keeps the bytes and says so.
func TestRebuildCutsATornTail(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{})
	for i := 1; i <= 3; i++ {
		if _, err := db.Put(ctx, "a", []byte(fmt.Sprintf("k%d", i)), []byte(fmt.Sprintf("value-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	flipValueByte(t, fs, "a", "value-3")
	plan, err := RebuildIndexWith(ctx, "db", Options{FS: fs}, RebuildOptions{Apply: true})
	if err != nil {
		t.Fatal(err)
	}
	cut := false
	for _, ev := range plan.Report.Events {
		if ev.Kind == EventDamaged {
			t.Fatalf("a damaged last record is a torn tail, not damage: %v", ev)
		}
		cut = cut || ev.Kind == EventCut
	}
	if !cut {
		t.Fatalf("no cut reported: %+v", plan.Report)
	}
	db = mustOpen(t, fs, Options{})
	defer db.Close()
	r, err := db.Put(ctx, "a", []byte("k4"), []byte("v"))
	if err != nil || r.Seq != 3 {
		t.Fatalf("append after the cut: %+v %v, want seq 3", r, err)
	}
}

// Appends acknowledged after an fsync of the journal survive a crash that
// loses their unsynced segment bytes, even when the index is rebuilt before
// the database is opened again: the rebuild must replay the journal too.
func TestRebuildAfterCrashKeepsJournaledAppends(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	db := mustOpen(t, mem, Options{SettleBytes: 1 << 30})
	acks := &ackLog{}
	for i := 0; i < 20; i++ {
		e := Entry{Anchor: fmt.Sprintf("a%d", i%3), Type: segment.TypePut, Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("v")}
		r, err := db.Append(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		acks.add(e, r)
	}
	crashed := testutil.CrashClone(mem, vfs.CrashCloneCfg{})
	_ = db.Close()

	plan, err := RebuildIndexWith(ctx, "db", Options{FS: crashed}, RebuildOptions{Apply: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range plan.Report.Events {
		if ev.Kind == EventDamaged {
			t.Fatalf("damage after a crash: %v", ev)
		}
	}
	db = mustOpen(t, crashed, Options{})
	defer db.Close()
	checkDB(t, db, acks.snapshot())
}
