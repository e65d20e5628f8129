package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/anchordb/anchordb/merge"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A frontier names a prefix of every log, and the state at it is
// deterministic (SPEC §1). One that names a seq past an anchor's head names
// records that do not exist: GetAt must refuse it with STATE_003 (SPEC §8),
// as Merged does, rather than answer from whatever the anchor holds now —
// an answer a later append to the anchor changes.
func TestReviewGetAtFrontierPastHead(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, memOpts(fs))
	defer db.Close()
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("one")); err != nil {
		t.Fatal(err)
	}
	f := merge.Frontier{"a": 2}
	for _, err := range db.Merged(ctx, MergedOptions{Frontier: f}) {
		if !errors.Is(err, ErrDependencyMissing) {
			t.Fatalf("merged at a frontier past the head: %v, want STATE_003", err)
		}
	}
	before, err := db.GetAt(ctx, []byte("k"), f)
	if !errors.Is(err, ErrDependencyMissing) {
		if _, err := db.Put(ctx, "a", []byte("k"), []byte("two")); err != nil {
			t.Fatal(err)
		}
		after, err2 := db.GetAt(ctx, []byte("k"), f)
		t.Fatalf("getat at a frontier past the head answers %q (%v), then %q (%v) after an append; want STATE_003",
			before.Value, err, after.Value, err2)
	}
}
