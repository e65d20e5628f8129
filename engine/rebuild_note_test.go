package engine

import (
	"context"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A rebuild from a snapshot that falls back to a full replay because of the
// database's own shape — here an ingested-style tail whose counter sorts
// before the snapshot's last record — says why in a note and carries no
// code: an integrity code (it said INT_004 index_mismatch) appears only when
// integrity is in question. The database is healthy and verifies.
func TestFastRebuildFallbackOnAHealthyDatabaseCarriesNoCode(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	opts := Options{FS: fs, SegmentSize: 4096}
	db := mustOpen(t, fs, opts)
	if _, err := db.Append(ctx, Entry{Anchor: "dev-3", Type: "BOOT", Value: []byte("x"), Counter: 50}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateSnapshot(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "dev-9", []byte("k"), []byte("v")); err != nil { // counter 51: after
		t.Fatal(err)
	}
	if _, err := db.Append(ctx, Entry{Anchor: "dev-1", Type: "put", Key: []byte("k"), Value: []byte("w"), Counter: 1}); err != nil { // sorts first
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	plan, err := RebuildIndexWith(ctx, "db", opts, RebuildOptions{Apply: true, FromSnapshot: true})
	if err != nil {
		t.Fatal(err)
	}
	fell := false
	for _, ev := range plan.Report.Events {
		if ev.Kind != EventFastRebuildAbandoned {
			continue
		}
		fell = true
		if ev.Err != nil || ev.Note == "" {
			t.Errorf("the fallback of a healthy rebuild: %s (error %v, note %q); want a note and no code", ev, ev.Err, ev.Note)
		}
	}
	if !fell {
		t.Fatalf("the fast path was taken: %v", plan.Report.Events)
	}
	db = mustOpen(t, fs, opts)
	defer db.Close()
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("verify after the rebuild: %+v %v", rep, err)
	}
}
