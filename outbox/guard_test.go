package outbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestIngestIntoAnOpenOutboxIsRefused: an ingest that would extend the
// anchor of an outbox open on the database is refused (STATE_001), and
// nothing is appended: the open Outbox is the one writer of its anchor,
// and records arriving behind its back would make its memory stale — here
// a completion that arrived from the other database, which the open
// Outbox would accept again under the same lease. Once the outbox is
// closed, the ingest goes through, and the outbox opened after it knows
// the completion.
func TestIngestIntoAnOpenOutboxIsRefused(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	clk := newClock()
	oopts := Options{Clock: clk.Now, FlushInterval: -1}
	eopts := engine.Options{FS: fs, SegmentSize: 4096}
	dbA, err := engine.Open("a", eopts)
	if err != nil {
		t.Fatal(err)
	}
	defer dbA.Close()
	obA, err := Open(ctx, dbA, "billing", oopts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obA.Enqueue(ctx, Message{ID: "x", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	cs, err := obA.Claim(ctx, "w", 1, time.Minute)
	if err != nil || len(cs) != 1 {
		t.Fatalf("claim: %v %v", cs, err)
	}
	lease := *cs[0].Lease
	if err := dbA.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// A copy of the database goes on elsewhere and completes the entry.
	if _, err := vfs.Clone(fs, fs, "a", "b", vfs.CloneSkip(func(p string) bool { return strings.HasSuffix(p, "LOCK") })); err != nil {
		t.Fatal(err)
	}
	dbB, err := engine.Open("b", eopts)
	if err != nil {
		t.Fatal(err)
	}
	obB, err := Open(ctx, dbB, "billing", oopts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obB.Complete(ctx, lease, []byte("from b")); err != nil {
		t.Fatal(err)
	}
	if err := obB.Close(); err != nil {
		t.Fatal(err)
	}
	if err := dbB.Close(); err != nil {
		t.Fatal(err)
	}

	headA := func() uint64 {
		info, _, err := dbA.AnchorInfo(ctx, obA.Anchor())
		if err != nil {
			t.Fatal(err)
		}
		return info.Records
	}
	had := headA()
	_, err = dbA.Ingest(ctx, "b", engine.IngestOptions{})
	if engine.CodeOf(err) != "STATE_001" || !strings.Contains(err.Error(), "outbox") {
		t.Fatalf("ingest into the anchor of an open outbox: %v, want STATE_001 naming the outbox", err)
	}
	if got := headA(); got != had {
		t.Fatalf("the refused ingest appended: %d records, had %d", got, had)
	}
	// The lease is still the entry's, and its completion is the only one.
	if _, err := obA.Complete(ctx, lease, []byte("from a")); err != nil {
		t.Fatal(err)
	}
	if err := obA.Close(); err != nil {
		t.Fatal(err)
	}
	rl, err := replayLog(ctx, dbA, "billing")
	if err != nil {
		t.Fatal(err)
	}
	if len(rl.problems) > 0 {
		t.Fatalf("the log: %v", rl.problems)
	}

	// With the outbox closed the ingest is the operator's to make: here
	// the logs have forked (both completed the entry), which the engine
	// refuses as it refuses every fork.
	if _, err := dbA.Ingest(ctx, "b", engine.IngestOptions{}); engine.CodeOf(err) != "STATE_002" {
		t.Fatalf("ingest of a forked outbox anchor: %v, want STATE_002", err)
	}
}

// TestIngestOfAnotherAnchorWithAnOpenOutbox: an open outbox holds its own
// anchor only, so an ingest of other anchors goes through; and an outbox
// whose anchor an ingest is joining cannot be opened until it ends.
func TestIngestOfAnotherAnchorWithAnOpenOutbox(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	eopts := engine.Options{FS: fs, SegmentSize: 4096}
	src, err := engine.Open("src", eopts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Put(ctx, "device-1", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	srcOb, err := Open(ctx, src, "invoices", Options{FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srcOb.Enqueue(ctx, Message{ID: "inv-1"}); err != nil {
		t.Fatal(err)
	}
	if err := srcOb.Close(); err != nil {
		t.Fatal(err)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := engine.Open("db", eopts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ob, err := Open(ctx, db, "billing", Options{FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	var during error
	_, err = db.Ingest(ctx, "src", engine.IngestOptions{Progress: func(done, total uint64) {
		if during == nil {
			o, err := Open(ctx, db, "invoices", Options{FlushInterval: -1})
			if err == nil {
				o.Close()
				err = errNotRefused
			}
			during = err
		}
	}})
	if err != nil {
		t.Fatalf("ingest of anchors no open outbox holds: %v", err)
	}
	if engine.CodeOf(during) != "STATE_001" {
		t.Fatalf("open of an outbox whose anchor is being ingested: %v, want STATE_001", during)
	}
	if _, err := ob.Enqueue(ctx, Message{ID: "after"}); err != nil {
		t.Fatal(err)
	}
	inv, err := Open(ctx, db, "invoices", Options{FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	if e, found, err := inv.Get(ctx, "inv-1"); err != nil || !found || e.State != StatePending {
		t.Fatalf("the ingested outbox: %+v %v %v", e, found, err)
	}
}

var errNotRefused = errors.New("not refused")
