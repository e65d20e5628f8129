package treestore

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// quiet is a pebble.Logger that logs nothing and panics on Fatalf.
type quiet struct{}

func (quiet) Infof(string, ...any)              {}
func (quiet) Errorf(string, ...any)             {}
func (quiet) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// index is a Pebble store holding the 's' rows and the stored 'n' rows of
// anchor's first n records, written as the engine's applier writes them,
// and the reference tree of the same records.
func index(t *testing.T, anchor string, n int) (*pebble.DB, *proof.MemStore) {
	t.Helper()
	db, err := pebble.Open("index", &pebble.Options{FS: vfs.NewMem(), Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	b := db.NewBatch()
	tree := proof.NewRange()
	ref := proof.NewMemStore()
	for i := range n {
		var h segment.Hash
		binary.BigEndian.PutUint64(h[:], uint64(i)+1)
		loc := schema.Location{Segno: 1, Offset: int64(i) * 100, Size: 100, Counter: uint64(i) + 1, Hash: h}
		if err := b.Set(schema.SeqKey(anchor, uint64(i)+1), loc.Append(nil), nil); err != nil {
			t.Fatal(err)
		}
		leaf := segment.LeafHash(h)
		if err := tree.Append(leaf[:], Visitor(b, anchor)); err != nil {
			t.Fatal(err)
		}
		if err := ref.Append(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	return db, ref
}

// The rows Visitor writes, with the 's' rows, load the tree at every size:
// the same roots as the tree built in memory.
func TestLoadAtEverySize(t *testing.T) {
	const n = 600 // past two level-8 nodes
	db, _ := index(t, "a", n)
	ref := proof.NewMemStore()
	for size := uint64(0); size <= n; size++ {
		rng, err := Load(context.Background(), db, "a", size)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if rng.End() != size {
			t.Fatalf("size %d: a range of %d leaves", size, rng.End())
		}
		if size > 0 {
			root, err := rng.GetRootHash(nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := ref.Root(); string(root) != string(want[:]) {
				t.Fatalf("size %d: root %x, want %x", size, root, want[:])
			}
		}
		var h segment.Hash
		binary.BigEndian.PutUint64(h[:], size+1)
		if err := ref.Append(h); err != nil {
			t.Fatal(err)
		}
	}
	// Only the levels that are stored were written: 600 leaves complete
	// two level-8 nodes and no level-16 one.
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte("n"), UpperBound: []byte("o")})
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for ok := it.First(); ok; ok = it.Next() {
		rows++
	}
	_ = it.Close()
	if rows != 2 {
		t.Fatalf("%d 'n' rows for 600 leaves, want 2 (level 8)", rows)
	}
	if Stored(0) || Stored(7) || !Stored(8) || !Stored(16) {
		t.Fatal("Stored does not name exactly the levels 8, 16, …")
	}
}

// A node past the end of the tree is STATE_003; a hole, a node of the
// wrong length and a level that is not stored are refused with their codes.
func TestNodesRefusals(t *testing.T) {
	ctx := context.Background()
	db, _ := index(t, "a", 300)
	s := Index{R: db, Anchor: "a"}
	if _, err := s.Nodes(ctx, 0, 290, 301); errs.CodeOf(err) != errs.CodeDependencyMissing {
		t.Fatalf("leaves past the end: %v, want STATE_003", err)
	}
	if _, err := s.Nodes(ctx, 3, 0, 1); errs.CodeOf(err) != errs.CodeInvalidInput {
		t.Fatalf("level 3: %v, want INPUT_001", err)
	}
	got, err := s.Nodes(ctx, 0, 5, 5)
	if err != nil || len(got) != 0 {
		t.Fatalf("an empty range: %v, %v", got, err)
	}
	if err := db.Delete(schema.SeqKey("a", 11), pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Nodes(ctx, 0, 0, 20); errs.CodeOf(err) != errs.CodeIndexMismatch {
		t.Fatalf("a missing 's' row: %v, want INT_004", err)
	}
	if err := db.Set(schema.NodeKey("a", 8, 0), []byte("short"), pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Nodes(ctx, 8, 0, 1); errs.CodeOf(err) != errs.CodeIndexMismatch {
		t.Fatalf("a node of 5 bytes: %v, want INT_004", err)
	}
}
