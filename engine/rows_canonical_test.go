package engine

import (
	"context"
	"slices"
	"testing"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2"
)

// TestRetainedRowWithTrailingBytes: an 'r' row holds exactly one frame.
// Verify refused one with bytes after the frame, but Record read it as the
// frame, so the damage showed only to verify. Found writing FuzzIndexRows
// (whose 'r' case takes a row only when the frame fills it, as verify
// does).
func TestRetainedRowWithTrailingBytes(t *testing.T) {
	ctx := context.Background()
	db := truncatedFixture(t)
	it, err := db.index.NewIter(&pebble.IterOptions{LowerBound: []byte{schema.TagKept}, UpperBound: []byte{schema.TagKept + 1}})
	if err != nil {
		t.Fatal(err)
	}
	if !it.First() {
		t.Fatal("the fixture has no 'r' row")
	}
	k, v := slices.Clone(it.Key()), slices.Clone(it.Value())
	_ = it.Close()
	prefix, _ := rowPrefix(k)
	anchor, seq := string(prefix[1:len(prefix)-1]), be.Uint64(k[len(prefix):])
	if _, err := db.Record(ctx, anchor, seq); err != nil {
		t.Fatalf("the kept record as compaction wrote it: %v", err)
	}
	setRow(t, db, k, append(v, 0))
	if rec, err := db.Record(ctx, anchor, seq); errs.CodeOf(err) != errs.CodeIndexMismatch {
		t.Fatalf("an 'r' row with a byte after its frame reads as %+v, %v; want INT_004", rec, err)
	}
}
