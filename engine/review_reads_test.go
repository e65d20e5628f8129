package engine

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Log's to is inclusive and any seq is a legal bound (the CLI's --to takes
// any uint64): a to of MaxUint64 means every record from from on. The
// upper bound of the index scan was schema.SeqKey(to+1), which wrapped to seq 0,
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

// An illegal anchor id is INPUT_001 (SPEC §8, §9) for every read that takes
// one, as Log already answered. Record looked the id up and called it a
// missing record (STATE_003): a caller told the record is not there yet
// would wait for one that can never exist.
func TestReviewRecordBadAnchorIsInvalidInput(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, memOpts(fs))
	defer db.Close()
	for _, bad := range []string{"", strings.Repeat("a", 256), "x\xff", "a\x00", "tab\there"} {
		if _, err := db.Record(ctx, bad, 1); !errors.Is(err, ErrInvalidInput) {
			t.Errorf("record of anchor %q: %v, want INPUT_001", bad, err)
		}
	}
}
