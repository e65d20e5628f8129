package proof

import (
	"testing"

	"github.com/anchordb/anchordb/segment"
	merkleproof "github.com/transparency-dev/merkle/proof"
	"pgregory.net/rapid"
)

// TestProofsProperty draws sizes and indices in a 3000-leaf tree (a little
// over 11 tiles) and checks every proof against the reference roots.
func TestProofsProperty(t *testing.T) {
	const n = 3000
	st, ref := buildCheap(t, n)
	h := segment.Blake3RFC6962
	rapid.Check(t, func(t *rapid.T) {
		size := rapid.Uint64Range(1, n).Draw(t, "size")
		index := rapid.Uint64Range(0, size-1).Draw(t, "index")
		old := rapid.Uint64Range(0, size).Draw(t, "old")

		root, err := RootAt(ctx, st, size)
		if err != nil {
			t.Fatal(err)
		}
		if want := ref.mth(0, size); string(root) != string(want) {
			t.Fatalf("RootAt(%d) differs from the reference", size)
		}
		incl, err := Inclusion(ctx, st, index, size)
		if err != nil {
			t.Fatal(err)
		}
		if err := merkleproof.VerifyInclusion(h, index, size, ref.leaves[index], incl, root); err != nil {
			t.Fatalf("inclusion (%d, %d): %v", index, size, err)
		}
		if other := (index + 1) % size; other != index {
			if merkleproof.VerifyInclusion(h, other, size, ref.leaves[index], incl, root) == nil &&
				string(ref.leaves[other]) != string(ref.leaves[index]) {
				t.Fatalf("inclusion (%d, %d) also verifies at index %d", index, size, other)
			}
		}
		cons, err := Consistency(ctx, st, old, size)
		if err != nil {
			t.Fatal(err)
		}
		if err := merkleproof.VerifyConsistency(h, old, size, cons, ref.mth(0, old), root); err != nil {
			t.Fatalf("consistency (%d, %d): %v", old, size, err)
		}
		if !equalHashes(cons, ref.consistency(old, size)) {
			t.Fatalf("consistency (%d, %d) differs from RFC 6962 PROOF", old, size)
		}
	})
}
