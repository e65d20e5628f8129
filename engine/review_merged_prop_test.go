package engine

import (
	"context"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"pgregory.net/rapid"
)

// TestReviewIngestedMergedViewMatchesReplay: after an ingest of another
// database's anchors — whose counters interleave with ours and tie with
// them — the merged view is every record sorted by (counter, anchor id
// bytes), Get is the replay of it, and GetAt at any prefix frontier is the
// replay up to it (SPEC §1, §4). Local writes after the ingest sort last.
func TestReviewIngestedMergedViewMatchesReplay(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		fs := vfs.NewMem()
		src, err := Open("src", Options{FS: fs, SegmentSize: 4096})
		if err != nil {
			t.Fatal(err)
		}
		dst, err := Open("dst", Options{FS: fs, SegmentSize: 4096})
		if err != nil {
			t.Fatal(err)
		}
		defer dst.Close()
		plan := genLogs(t)
		// Each anchor lives on one side (one written on both would be a
		// fork). The source's are ingested in two exchanges, so the second
		// extends anchors the first joined.
		side := map[string]bool{}
		for _, a := range mergeAnchors {
			side[a] = rapid.Bool().Draw(t, "side "+a)
		}
		m := rapid.IntRange(0, len(plan)).Draw(t, "exchange at")
		for i, p := range plan {
			if i == m {
				if err := src.Close(); err != nil {
					t.Fatal(err)
				}
				if _, err := dst.Ingest(ctx, "src", IngestOptions{}); err != nil {
					t.Fatalf("first ingest: %v", err)
				}
				if src, err = Open("src", Options{FS: fs, SegmentSize: 4096}); err != nil {
					t.Fatal(err)
				}
			}
			db := dst
			if side[p.anchor] {
				db = src
			}
			appendPlanned(t, db, []plannedAppend{p})
		}
		if err := src.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := dst.Ingest(ctx, "src", IngestOptions{}); err != nil {
			t.Fatalf("ingest: %v", err)
		}
		f, err := dst.Frontier(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if f.Total() != uint64(len(plan)) {
			t.Fatalf("frontier holds %d records, %d were written", f.Total(), len(plan))
		}
		checkAgainstReplay(t, dst, f)
		// The clock moved past what arrived: a default-counter write wins.
		for _, a := range []string{"Z", "local"} {
			if _, err := dst.Put(ctx, a, []byte("k0"), []byte("last "+a)); err != nil {
				t.Fatal(err)
			}
			if v, err := dst.Get(ctx, []byte("k0")); err != nil || string(v.Value) != "last "+a {
				t.Fatalf("a write after the ingest does not win: %q %v", v.Value, err)
			}
		}
	})
}
