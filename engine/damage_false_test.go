package engine

import (
	"context"
	"testing"
	"time"

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
