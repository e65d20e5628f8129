package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestCounterLimitAllowsRetryOfOlderAppend: an append acknowledged before the
// caller limit (counter above 2^62-1, idempotency key k) is retried as the
// caller sent it. SPEC §7: same key, same fingerprint -> the original
// receipt with duplicate:true, whatever the counter. A new append with such
// a counter is still refused (INPUT_001), with or without a key.
func TestCounterLimitAllowsRetryOfOlderAppend(t *testing.T) {
	mem := vfs.NewMem()
	db := mustOpen(t, mem, crashOptions(mem, false))
	defer db.Close()
	ctx := context.Background()
	const c = MaxCallerCounter + 10
	rec := segment.Record{Anchor: "old", Seq: 1, Counter: c, Time: 1, Type: segment.TypePut,
		Key: []byte("k"), Value: []byte("v"), IdempotencyKey: []byte("op-1"), PrevHash: segment.GenesisHash("old")}
	rec.Hash = rec.ComputeHash()
	if err := db.appendVerbatim(ctx, []segment.Record{rec}); err != nil {
		t.Fatal(err)
	}
	r, err := db.Append(ctx, Entry{Anchor: "old", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v"), IdempotencyKey: []byte("op-1"), Counter: c})
	if err != nil || !r.Duplicate || r.Counter != c {
		t.Fatalf("retry of an acknowledged append: want its receipt (duplicate), got %+v %v", r, err)
	}
	// The same in a batch, with a new entry beside it.
	rs, err := db.AppendBatch(ctx, []Entry{
		{Anchor: "old", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v"), IdempotencyKey: []byte("op-1"), Counter: c},
		{Anchor: "new", Type: segment.TypePut, Key: []byte("k2"), Value: []byte("v")},
	})
	if err != nil || !rs[0].Duplicate || rs[0].Counter != c || rs[1].Duplicate {
		t.Fatalf("a batch with the retry: %+v %v", rs, err)
	}
	// In a batch, the refusal names its entry, as every other does.
	_, err = db.AppendBatch(ctx, []Entry{
		{Anchor: "fresh", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v")},
		{Anchor: "fresh", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v"), Counter: c + 1},
	})
	if !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), "entry 1") {
		t.Errorf("a batch with a counter above the limit: want INPUT_001 naming entry 1, got %v", err)
	}
	for _, e := range []Entry{
		{Anchor: "old", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v"), IdempotencyKey: []byte("op-2"), Counter: c + 1},
		{Anchor: "fresh", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v"), IdempotencyKey: []byte("op-3"), Counter: c + 1},
		{Anchor: "fresh", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v"), Counter: c + 1},
		{Anchor: "fresh", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v"), IdempotencyKey: []byte("op-4"), Counter: MaxCounter + 1},
	} {
		if _, err := db.Append(ctx, e); !errors.Is(err, ErrInvalidInput) {
			t.Errorf("a new append with counter %d (key %q): want INPUT_001, got %v", e.Counter, e.IdempotencyKey, err)
		}
	}
}

// TestIdempotencyReceipt: the receipt of the append that used a key, as a
// retry would get it; nothing for a key no append used, in this anchor or
// at all; INPUT_001 for an anchor id that is not one.
func TestIdempotencyReceipt(t *testing.T) {
	mem := vfs.NewMem()
	db := mustOpen(t, mem, crashOptions(mem, false))
	defer db.Close()
	ctx := context.Background()
	r, err := db.Append(ctx, Entry{Anchor: "a", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v"), IdempotencyKey: []byte("op-1")})
	if err != nil {
		t.Fatal(err)
	}
	got, found, err := db.IdempotencyReceipt(ctx, "a", []byte("op-1"))
	want := r
	want.Duplicate = true
	if err != nil || !found || got != want {
		t.Fatalf("IdempotencyReceipt(a, op-1) = %+v %v %v, want %+v", got, found, err, want)
	}
	for _, c := range []struct{ anchor, key string }{{"a", "op-2"}, {"b", "op-1"}} {
		if got, found, err := db.IdempotencyReceipt(ctx, c.anchor, []byte(c.key)); err != nil || found {
			t.Fatalf("IdempotencyReceipt(%s, %s) = %+v %v %v, want none", c.anchor, c.key, got, found, err)
		}
	}
	if _, _, err := db.IdempotencyReceipt(ctx, "", []byte("op-1")); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("an empty anchor id: %v, want INPUT_001", err)
	}
}
