package engine

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/anchordb/anchordb/proof"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A finding of Verify or a read makes its anchor read-only until an operator
// rebuilds the index (damage.go), so a finding on a healthy database is no
// longer only a wrong report: it stops the anchor's writers. These are the
// ways a healthy database got one.

// A compaction that truncates segments while Verify reads them: Verify
// listed a segment, then found it gone and its successor's header not
// continuing the chain it had read (INT_002), and so made the anchor
// read-only on a healthy database.
func TestVerifyDuringTruncationMarksNothing(t *testing.T) {
	ctx := context.Background()
	fs := &openHookFS{FS: vfs.NewMem(), match: ".seg"}
	db := mustOpen(t, fs, Options{SegmentSize: 4096, InlineValueMax: 64})
	defer db.Close()
	fillOutOfLine(t, db, "a", 300)
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil { // S1
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "a", []byte("other"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	coverKeysCheckpoint(t, db)

	// Verify's first open of a segment runs the compaction that truncates
	// it, and waits for it a while (a compaction that waits for Verify
	// instead is the fix).
	done := make(chan struct{})
	var res CompactionResult
	var cerr error
	fs.hook = func() {
		go func() {
			defer close(done)
			res, cerr = db.Compact(ctx, truncatePolicy, CompactOptions{Apply: true})
		}()
		select {
		case <-done:
		case <-time.After(500 * time.Millisecond):
		}
	}
	fs.armed.Store(true)
	rep, err := db.Verify(ctx, VerifyOptions{})
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if cerr != nil || res.RemovedBytes == 0 {
		t.Fatalf("the compaction removed nothing: %v %s", cerr, res.Plan)
	}
	if _, err := db.Put(ctx, "a", []byte("after"), []byte("y")); err != nil {
		t.Fatalf("the anchor is read-only after a Verify across a truncation: %v", err)
	}
	if !rep.OK {
		t.Fatalf("Verify across a truncation: %+v", rep.Failures)
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("verify after: %+v %v", rep, err)
	}
}

// A checkpoint passed as VerifyOptions.From is the caller's claim: one that
// disagrees with the anchors' trees (a wrong root, more records than the
// log has) is reported, and each anchor is then checked in full, which
// finds any damage of the log itself. The disagreement alone made the
// anchors read-only: any checkpoint object with this database's origin,
// signed by anyone (or, built in code, by no one), stopped their writers.
// The same holds for what the stored checkpoints claim.
func TestVerifyFromAWrongCheckpointMarksNothing(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, memOpts(fs))
	defer db.Close()
	appendN(t, db, []string{"a", "b"}, 30, "x")
	skey, _ := coverKeys(t)
	_, cp, err := db.CreateCheckpoint(ctx, skey)
	if err != nil {
		t.Fatal(err)
	}
	entries := slices.Clone(cp.Entries)
	entries[0].Root[0] ^= 1 // a: another root
	entries[1].Size += 5    // b: records the log does not have
	wrong, err := proof.NewCheckpoint(db.ID(), cp.Time, entries)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := db.Verify(ctx, VerifyOptions{From: wrong})
	if err != nil || rep.OK {
		t.Fatalf("a wrong checkpoint is not reported: %+v %v", rep, err)
	}
	for _, f := range rep.Failures {
		if f.Anchor != "a" && f.Anchor != "b" {
			t.Fatalf("finding %+v", f)
		}
	}
	for _, a := range []string{"a", "b"} {
		if _, err := db.Put(ctx, a, []byte("k"), []byte("v")); err != nil {
			t.Errorf("anchor %s is read-only after a Verify from a wrong checkpoint: %v", a, err)
		}
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("verify without it: %+v %v", rep, err)
	}
}
