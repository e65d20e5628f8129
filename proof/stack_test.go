package proof

import (
	"fmt"
	"testing"

	"github.com/anchordb/anchordb/segment"
	"github.com/transparency-dev/merkle/compact"
)

// The allocation-free Stack reports the same nodes, in the same order, and
// the same roots as compact.Range with the BLAKE3 hasher, from an empty
// start and from a range loaded at any size.
func TestStackMatchesCompactRange(t *testing.T) {
	ref := NewRange()
	var mine Stack
	leaf := func(i int) segment.Hash { return segment.LeafHash(segment.Hash{byte(i), byte(i >> 8), 7}) }
	for i := 0; i < 1100; i++ {
		h := leaf(i)
		var want, got []string
		if err := ref.Append(h[:], func(id compact.NodeID, hash []byte) {
			if id.Level > 0 {
				want = append(want, fmt.Sprintf("%d/%d/%x", id.Level, id.Index, hash))
			}
		}); err != nil {
			t.Fatal(err)
		}
		mine.Append(h, func(level uint, index uint64, hash *segment.Hash) {
			got = append(got, fmt.Sprintf("%d/%d/%x", level, index, hash[:]))
		})
		if fmt.Sprint(want) != fmt.Sprint(got) {
			t.Fatalf("leaf %d: nodes %v, want %v", i, got, want)
		}
		root, _ := ref.GetRootHash(nil)
		if r := mine.Root(); string(r[:]) != string(root) || mine.Size() != ref.End() {
			t.Fatalf("size %d: root %x, want %x", i+1, r, root)
		}
		// A stack loaded at this size goes on like the one built leaf by leaf.
		if i%97 == 0 {
			loaded := StackFrom(ref.Hashes(), ref.End())
			h2 := leaf(i + 1)
			loaded.Append(h2, nil)
			cont := mine
			cont.Append(h2, nil)
			if loaded.Root() != cont.Root() {
				t.Fatalf("loaded at %d: roots differ", i+1)
			}
		}
	}
	var empty Stack
	if r := empty.Root(); string(r[:]) != string(segment.Blake3RFC6962.EmptyRoot()) {
		t.Fatalf("empty root %x", r)
	}
	l, r := leaf(1), leaf(2)
	if got := hashChildren(&l, &r); string(got[:]) != string(segment.Blake3RFC6962.HashChildren(l[:], r[:])) {
		t.Fatal("hashChildren differs from the segment hasher")
	}
}
