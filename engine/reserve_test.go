package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestReserveAnchorKeepsIngestOff: an ingest whose source carries a
// reserved anchor is refused whole (STATE_001 naming the holder) and
// appends nothing, to that anchor or any other; once the reservation is
// released the same ingest goes through. A second reservation of one
// anchor, and one of an anchor an ingest is joining, are STATE_001.
func TestReserveAnchorKeepsIngestOff(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	src := openAt(t, fs, "src")
	writeSome(t, src, []string{"held", "free"}, 20, "src")
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	db := openAt(t, fs, "db")
	defer db.Close()
	r, err := db.ReserveAnchor("held", `outbox "billing"`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ReserveAnchor("held", "another"); CodeOf(err) != "STATE_001" {
		t.Fatalf("second reservation: %v, want STATE_001", err)
	}
	_, err = db.Ingest(ctx, "src", IngestOptions{})
	if CodeOf(err) != "STATE_001" || !strings.Contains(err.Error(), `outbox "billing"`) {
		t.Fatalf("ingest of a reserved anchor: %v, want STATE_001 naming the holder", err)
	}
	for _, a := range []string{"held", "free"} {
		if info, found, err := db.AnchorInfo(ctx, a); err != nil || found || info.Records != 0 {
			t.Fatalf("the refused ingest created anchor %q: %+v %v %v", a, info, found, err)
		}
	}
	// Other anchors alone go through.
	if _, err := db.Ingest(ctx, "src", IngestOptions{Anchors: []string{"free"}}); err != nil {
		t.Fatalf("ingest of an anchor not reserved: %v", err)
	}
	r.Release()
	r.Release()
	var during error
	rep, err := db.Ingest(ctx, "src", IngestOptions{Progress: func(uint64, uint64) {
		if during == nil {
			_, during = db.ReserveAnchor("held", "late")
		}
	}})
	if err != nil || rep.Appended == 0 {
		t.Fatalf("ingest after the release: %+v %v", rep, err)
	}
	if CodeOf(during) != "STATE_001" {
		t.Fatalf("reservation of an anchor being ingested: %v, want STATE_001", during)
	}
	if _, err := db.ReserveAnchor("", "x"); CodeOf(err) != "INPUT_001" {
		t.Fatalf("reservation of an empty anchor id: %v", err)
	}
	if _, err := db.ReserveAnchor("held", "after"); err != nil {
		t.Fatalf("reservation once the ingest ended: %v", err)
	}
}
