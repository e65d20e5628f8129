package engine

import (
	"context"
	"math"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Log's to is inclusive and any seq is a legal bound (the CLI's --to takes
// any uint64): a to of MaxUint64 means every record from from on. The
// upper bound of the index scan was seqKey(to+1), which wrapped to seq 0,
// below the lower bound, and the log came back empty.
func TestReviewLogToMaxUint64(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, memOpts(fs))
	defer db.Close()
	for i := 0; i < 3; i++ {
		if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ from, to, want uint64 }{
		{1, math.MaxUint64, 3},
		{2, math.MaxUint64, 2},
		{0, math.MaxUint64 - 1, 3},
		{math.MaxUint64, math.MaxUint64, 0},
		{math.MaxUint64, 0, 0},
	} {
		var seqs []uint64
		for rec, err := range db.Log(ctx, "a", c.from, c.to) {
			if err != nil {
				t.Fatalf("log [%d, %d]: %v", c.from, c.to, err)
			}
			seqs = append(seqs, rec.Seq)
		}
		if uint64(len(seqs)) != c.want {
			t.Errorf("log [%d, %d]: seqs %v, want %d records", c.from, c.to, seqs, c.want)
		}
	}
}
