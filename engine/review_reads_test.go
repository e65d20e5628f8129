package engine

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"pgregory.net/rapid"
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

// A malformed 'k' row is INT_004, never a panic (keys.go). A key with no
// 0x00 0x01 separator ran the parse off its end: the tail was sliced from
// two bytes past the last.
func TestReviewParseVersionKeyNoSeparator(t *testing.T) {
	for name, k := range map[string][]byte{
		"no separator":      []byte("kabcdefghijklmn\xff"),
		"escape at the end": []byte("kabcdefghijklm\x00\xff"),
	} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: %x panicked: %v", name, k, r)
				}
			}()
			if _, _, _, err := parseVersionKey(k); err == nil {
				t.Errorf("%s: %x parsed", name, k)
			}
		}()
	}
	rapid.Check(t, func(t *rapid.T) {
		k := rapid.SliceOfN(rapid.SampledFrom([]byte{0, 1, 'k', 'x', 0xFF}), 0, 40).Draw(t, "k")
		if rapid.Bool().Draw(t, "tagged") {
			k = append([]byte{tagKey}, append(k, 0xFF)...)
		}
		_, _, _, _ = parseVersionKey(k)
	})
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
