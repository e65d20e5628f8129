package engine

import (
	"context"
	"testing"

	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestCompactBesideNewAnchorNotOnDisk: an anchor's first records are
// acknowledged while their segment bytes may still be buffered, before
// its directory exists (segwrite.go). Compaction listed the directory of
// every anchor for its sealed segments and failed on that one: IO_001
// "list ...: file does not exist", for a compaction that has nothing
// wrong to report. An anchor without a directory has no sealed segment
// on disk.
//
// Found by TestCloseStressEveryAPI.
func TestCompactBesideNewAnchorNotOnDisk(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{})
	defer db.Close()
	if _, err := db.Put(ctx, "new", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	// A snapshot of it, so compaction reads none of its records (which
	// would write its buffer out).
	if _, err := db.CreateSnapshot(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(segmentAnchorDir(fs, "db", "new")); err == nil {
		t.Skip("the append wrote the anchor's directory: nothing to test")
	}
	if _, err := db.Compact(ctx, snapshot.DefaultPolicy(), CompactOptions{Apply: true}); err != nil {
		t.Fatalf("compact beside an anchor still in the write buffers: %v", err)
	}
}
