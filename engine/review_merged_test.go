package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
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

// Merged holds a small buffer per anchor (SPEC §4, DESIGN §10), sized so
// that 100,000 anchors stay in memory. Each source kept its own 32 KiB
// read-ahead buffer between refills, so a merge of many short logs held
// 33 KB an anchor: 3.3 GB for 100,000 anchors. Refills run one at a time,
// so one buffer serves them all.
func TestReviewMergedMemoryPerAnchor(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 4,000 anchors")
	}
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, memOpts(fs))
	defer db.Close()
	const n = 4000
	var batch []Entry
	for i := 0; i < n; i++ {
		batch = append(batch, Entry{Anchor: fmt.Sprintf("a%05d", i), Type: "put", Key: []byte("k"), Value: []byte("v")})
		if len(batch) == 500 {
			if _, err := db.AppendBatch(ctx, batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	runtime.GC()
	var before, during runtime.MemStats
	runtime.ReadMemStats(&before)
	i := 0
	for _, err := range db.Merged(ctx, MergedOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if i++; i == n/2 { // every source has been read from
			runtime.GC()
			runtime.ReadMemStats(&during)
		}
	}
	if i != n {
		t.Fatalf("merged %d records, want %d", i, n)
	}
	perAnchor := (int64(during.HeapAlloc) - int64(before.HeapAlloc)) / n
	if perAnchor > 8<<10 {
		t.Fatalf("Merged holds %d bytes an anchor over %d anchors of one record each", perAnchor, n)
	}
}
