package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestIngestNamedAnchorWithoutLog: an anchor named in IngestOptions.Anchors
// whose directory in the source holds no segment has no log there: it is
// STATE_003, as an anchor with no directory is, and nothing is joined. It
// was skipped in silence, and the ingest reported success without it.
func TestIngestNamedAnchorWithoutLog(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	src := openAt(t, fs, "src")
	writeSome(t, src, []string{"a"}, 3, "src")
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fs.MkdirAll(segmentAnchorDir(fs, "src", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	dst := openAt(t, fs, "dst")
	defer dst.Close()
	for _, named := range [][]string{{"b"}, {"a", "b"}} {
		rep, err := dst.Ingest(ctx, "src", IngestOptions{Anchors: named})
		if !errors.Is(err, ErrDependencyMissing) || rep.Appended != 0 {
			t.Fatalf("ingest of %q: %+v %v, want STATE_003 and nothing joined", named, rep, err)
		}
		if _, ok, _ := dst.AnchorInfo("a"); ok {
			t.Fatalf("ingest of %q joined a", named)
		}
	}
	// Every anchor: the empty directory is no anchor, and a is joined.
	rep, err := dst.Ingest(ctx, "src", IngestOptions{})
	if err != nil || rep.Appended != 3 || len(rep.Anchors) != 1 {
		t.Fatalf("ingest of every anchor: %+v %v", rep, err)
	}
}
