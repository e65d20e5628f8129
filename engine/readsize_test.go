package engine

import (
	"context"
	"runtime"
	"testing"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestLogRowSizeAboveAnyFrame: a seq row whose frame size is larger than any
// frame (damage to the index: the row's size field is a u32) is INT_004,
// found before the size sizes a read. The frame reader allocated a buffer
// of the size the row gave — 4 GiB — to find the segment shorter.
func TestLogRowSizeAboveAnyFrame(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, memOpts(fs))
	defer db.Close()
	for _, k := range []string{"k1", "k2"} {
		if _, err := db.Put(ctx, "a", []byte(k), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.commit.awaitVisible(ctx); err != nil {
		t.Fatal(err)
	}
	e, ok, err := db.location("a", 2)
	if err != nil || !ok {
		t.Fatalf("seq row: %v %v", ok, err)
	}
	e.Size = 1<<32 - 1
	setRow(t, db, schema.SeqKey("a", 2), e.Append(nil))
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var got error
	for _, err := range db.Log(ctx, "a", 1, 0) {
		if err != nil {
			got = err
			break
		}
	}
	runtime.ReadMemStats(&after)
	if errs.CodeOf(got) != errs.CodeIndexMismatch {
		t.Fatalf("log: %v, want INT_004", got)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 16<<20 {
		t.Fatalf("allocated %d bytes reading a row that says %d", n, e.Size)
	}
}
