package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestBatchReportsItsFirstRefusal: a batch with several refused entries is
// refused for the first of them in entry order, whether the later one
// conflicts with a key already stored (which admission looks up before the
// leader validates the batch) or not.
//
// Found by TestModel (-rapid.seed=3561451669760600802, 2026-11-24): entry 1
// repeated entry 0's idempotency key with another payload, entry 2 reused a
// stored key with another payload, and the batch reported entry 2's
// conflict.
func TestBatchReportsItsFirstRefusal(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t, vfs.NewMem(), Options{})
	defer db.Close()
	stored := Entry{Anchor: "z", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v"), IdempotencyKey: []byte("op-3")}
	if _, err := db.Append(ctx, stored); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Append(ctx, Entry{Anchor: "x", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v"), Counter: 10}); err != nil {
		t.Fatal(err)
	}
	reusesStored := stored
	reusesStored.Value = []byte("another payload")

	t.Run("idempotency key repeated in the batch", func(t *testing.T) {
		_, err := db.AppendBatch(ctx, []Entry{
			{Anchor: "x", Type: "EVENT", Value: []byte("a"), IdempotencyKey: []byte("op-1")},
			{Anchor: "x", Type: "EVENT", Value: []byte("b"), IdempotencyKey: []byte("op-1")},
			reusesStored,
		})
		var ce *ConflictError
		if !errors.As(err, &ce) || ce.Original.Anchor != "x" || ce.Original.Seq != 2 {
			t.Fatalf("got %v, want entry 1's conflict with entry 0 (anchor x, seq 2)", err)
		}
	})
	t.Run("counter not increasing", func(t *testing.T) {
		_, err := db.AppendBatch(ctx, []Entry{
			{Anchor: "x", Type: "EVENT", Value: []byte("a"), Counter: 5},
			reusesStored,
		})
		var ce *ConflictError
		if errs.CodeOf(err) != errs.CodeConflict || errors.As(err, &ce) || !strings.Contains(err.Error(), "counter") {
			t.Fatalf("got %v, want entry 0's counter refusal", err)
		}
	})
	t.Run("a single entry", func(t *testing.T) {
		_, err := db.Append(ctx, reusesStored)
		var ce *ConflictError
		if !errors.As(err, &ce) || ce.Original.Anchor != "z" || ce.Original.Seq != 1 {
			t.Fatalf("got %v, want the conflict with the stored key (anchor z, seq 1)", err)
		}
	})
}
