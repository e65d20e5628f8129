package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestProofRefusesAMalformedTreeKey: a damaged 's' key that still sorts
// between a proof's bounds (one byte longer, its last eight bytes another
// seq) is INT_004 naming the malformed key. The index used to be read from
// the key's last eight bytes whatever its length: here, a row that claims
// to be seq 2 ahead of the real one.
func TestProofRefusesAMalformedTreeKey(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t, vfs.NewMem(), Options{})
	defer db.Close()
	for _, k := range []string{"k1", "k2", "k3"} {
		if _, err := db.Put(ctx, "a", []byte(k), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ProveInclusion(ctx, "a", 1, 3); err != nil {
		t.Fatal(err)
	}
	v, closer, err := db.index.Get(schema.SeqKey("a", 2))
	if err != nil {
		t.Fatal(err)
	}
	row := append([]byte(nil), v...)
	_ = closer.Close()
	forged := append(schema.SeqKey("a", 1), schema.SeqKey("a", 2)[len(schema.SeqKey("a", 2))-8:]...)
	if err := db.index.Set(forged, row, pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	_, err = db.ProveInclusion(ctx, "a", 1, 3)
	if errs.CodeOf(err) != errs.CodeIndexMismatch || !strings.Contains(err.Error(), "malformed index key") {
		t.Fatalf("proof over a malformed 's' key: %v", err)
	}
}
