package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

func memOpts(fs vfs.FS) Options {
	return Options{FS: fs, SegmentSize: 4096}
}

func mustOpen(t testing.TB, fs vfs.FS, opts Options) *DB {
	t.Helper()
	opts.FS = fs
	db, err := Open("db", opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return db
}

func TestPutGetReopen(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, memOpts(fs))
	r1, err := db.Put(ctx, "dev-1", []byte("color"), []byte("blue"))
	if err != nil {
		t.Fatal(err)
	}
	if r1.Seq != 1 || r1.Counter != 1 {
		t.Fatalf("receipt %+v", r1)
	}
	r2, err := db.Put(ctx, "dev-1", []byte("color"), []byte("green"))
	if err != nil {
		t.Fatal(err)
	}
	if r2.Seq != 2 || r2.Counter <= r1.Counter {
		t.Fatalf("receipt %+v", r2)
	}
	v, err := db.Get(ctx, []byte("color"))
	if err != nil || string(v.Value) != "green" || v.Seq != 2 {
		t.Fatalf("get: %+v %v", v, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = mustOpen(t, fs, memOpts(fs))
	defer db.Close()
	v, err = db.Get(ctx, []byte("color"))
	if err != nil || string(v.Value) != "green" {
		t.Fatalf("get after reopen: %+v %v", v, err)
	}
	var seqs []uint64
	var prev segment.Hash = segment.GenesisHash("dev-1")
	for rec, err := range db.Log(ctx, "dev-1", 1, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if rec.PrevHash != prev {
			t.Fatalf("chain broken at %d", rec.Seq)
		}
		prev = rec.Hash
		seqs = append(seqs, rec.Seq)
	}
	if fmt.Sprint(seqs) != "[1 2]" {
		t.Fatalf("log seqs %v", seqs)
	}
	r3, err := db.Put(ctx, "dev-1", []byte("color"), []byte("red"))
	if err != nil || r3.Seq != 3 || r3.Counter <= r2.Counter {
		t.Fatalf("put after reopen %+v %v", r3, err)
	}
}

func TestManyWritersSealing(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, memOpts(fs))
	const writers, per, anchors = 8, 200, 5
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				an := fmt.Sprintf("a%d", (w+i)%anchors)
				if _, err := db.Put(ctx, an, []byte(fmt.Sprintf("k%d-%d", w, i)), []byte("value-value-value")); err != nil {
					t.Error(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	total := uint64(0)
	for info, err := range db.Anchors(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		total += info.Records
		n := uint64(0)
		for rec, err := range db.Log(ctx, info.ID, 1, 0) {
			if err != nil {
				t.Fatal(err)
			}
			n++
			if rec.Seq != n {
				t.Fatalf("seq %d want %d", rec.Seq, n)
			}
		}
		if n != info.Records {
			t.Fatalf("anchor %s log %d records, head %d", info.ID, n, info.Records)
		}
		if info.Segments < 2 {
			t.Fatalf("anchor %s never sealed (segments %d)", info.ID, info.Segments)
		}
	}
	if total != writers*per {
		t.Fatalf("total %d", total)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = mustOpen(t, fs, memOpts(fs))
	defer db.Close()
	n := 0
	for _, err := range db.Scan(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != writers*per {
		t.Fatalf("scan %d", n)
	}
}

func TestIdempotency(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, memOpts(fs))
	defer db.Close()
	e := Entry{Anchor: "q", Type: "put", Key: []byte("k"), Value: []byte("v"), IdempotencyKey: []byte("op-1")}
	r1, err := db.Append(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := db.Append(ctx, e)
	if err != nil || !r2.Duplicate || r2.Seq != r1.Seq || r2.Hash != r1.Hash {
		t.Fatalf("dup %+v %v", r2, err)
	}
	e.Value = []byte("other")
	_, err = db.Append(ctx, e)
	var ce *ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, ErrConflict) || ce.Original.Seq != 1 {
		t.Fatalf("conflict: %v", err)
	}
	// SPEC §7: the conflict carries the original receipt, which was no
	// duplicate.
	if ce.Original != r1 {
		t.Fatalf("conflict carries %+v, the original receipt was %+v", ce.Original, r1)
	}
}
