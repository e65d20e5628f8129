package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestIngestHoldsItsAnchors: while an ingest joins anchors, a local append
// to one of them must not slip in between the ingest's check of our head
// and its join. It used to: the continuation of "b" was checked against
// our head in pass 1, a local append moved the head, and pass 2 refused "b"
// as a fork after "a" was already joined — a refusal with something joined,
// which ingest promises never to do. A local append to an anchor being
// ingested is now refused (STATE_001) until the ingest ends; other anchors
// take appends as usual.
func TestIngestHoldsItsAnchors(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	open := func(dir string) *DB {
		t.Helper()
		db, err := Open(dir, Options{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	put := func(db *DB, anchor, key string) {
		t.Helper()
		if _, err := db.Put(ctx, anchor, []byte(key), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	src := open("src")
	put(src, "b", "b1")
	put(src, "b", "b2")
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	dst := open("dst")
	defer dst.Close()
	if _, err := dst.Ingest(ctx, "src", IngestOptions{}); err != nil {
		t.Fatal(err)
	}
	src = open("src")
	for _, k := range []string{"a1", "a2", "a3"} {
		put(src, "a", k)
	}
	put(src, "b", "b3")
	put(src, "b", "b4")
	srcB, _, err := src.AnchorInfo(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}

	// After the first anchor's batch, before the second's: a local append
	// to each (one of them is not joined yet) and to an anchor the ingest
	// does not touch.
	var ingested [2]error
	var other error
	calls := 0
	rep, err := dst.Ingest(ctx, "src", IngestOptions{Progress: func(done, total uint64) {
		if calls++; calls == 1 {
			_, ingested[0] = dst.Put(ctx, "a", []byte("local"), []byte("v"))
			_, ingested[1] = dst.Put(ctx, "b", []byte("local"), []byte("v"))
			_, other = dst.Put(ctx, "c", []byte("local"), []byte("v"))
		}
	}})
	if err != nil {
		t.Fatalf("ingest with a local append to one of its anchors in between: %v (report %+v)", err, rep)
	}
	if calls == 0 {
		t.Fatal("the progress callback never ran: the test tested nothing")
	}
	for i, err := range ingested {
		if !errors.Is(err, ErrScopeLocked) {
			t.Fatalf("a local append to anchor %q while it is ingested: %v, want STATE_001", "ab"[i:i+1], err)
		}
	}
	if other != nil {
		t.Fatalf("a local append to an anchor not being ingested: %v", other)
	}
	if rep.Appended != 5 {
		t.Fatalf("appended %d records, want 5 (a1–a3, b3–b4): %+v", rep.Appended, rep)
	}
	b, _, err := dst.AnchorInfo(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	if b.Records != 4 || b.HeadHash != srcB.HeadHash {
		t.Fatalf("b after the ingest: %d records, head %s; want the source's 4, %s", b.Records, b.HeadHash, srcB.HeadHash)
	}
	// Once the ingest is over, the anchor takes local appends again.
	put(dst, "b", "after")
	if rep, err := dst.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep.Failures, err)
	}
}
