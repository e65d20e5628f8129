package proof

import (
	"github.com/anchordb/anchordb/segment"
	"github.com/zeebo/blake3"
)

// Stack is an anchor tree rebuilt leaf by leaf, as verification streams
// over a chain: a compact range from leaf 0 — one perfect-subtree root per
// set bit of the size, largest first — kept in a fixed array, so that
// appending allocates nothing (compact.Range allocates every node hash,
// which shows at a record's cost). Its nodes and roots are those of a
// compact.Range from NewRange (stack_test.go checks). The zero Stack is the
// empty tree.
type Stack struct {
	size   uint64
	n      int
	hashes [64]segment.Hash
}

// StackFrom is the tree of size leaves whose compact range hashes are
// hashes (compact.Range.Hashes of a range from 0, as LoadRange returns).
// The caller guarantees the shape: one hash per set bit of size, largest
// subtree first.
func StackFrom(hashes [][]byte, size uint64) Stack {
	t := Stack{size: size}
	for _, h := range hashes {
		copy(t.hashes[t.n][:], h)
		t.n++
	}
	return t
}

// Size is the number of leaves.
func (t *Stack) Size() uint64 { return t.size }

// Append adds a leaf hash (segment.LeafHash of a record hash). visit, if
// not nil, sees every perfect-subtree node the leaf completes, bottom up, as
// compact.Range's Append visitor reports them (level ≥ 1).
func (t *Stack) Append(leaf segment.Hash, visit func(level uint, index uint64, h *segment.Hash)) {
	h := leaf
	idx := t.size
	level := uint(0)
	for (t.size>>level)&1 == 1 {
		t.n--
		h = hashChildren(&t.hashes[t.n], &h)
		level++
		if visit != nil {
			visit(level, idx>>level, &h)
		}
	}
	t.hashes[t.n] = h
	t.n++
	t.size++
}

// Root returns the RFC 6962 root: the empty root for no leaves, else the
// subtree roots folded from the right.
func (t *Stack) Root() segment.Hash {
	if t.n == 0 {
		return blake3.Sum256(nil)
	}
	h := t.hashes[t.n-1]
	for i := t.n - 2; i >= 0; i-- {
		h = hashChildren(&t.hashes[i], &h)
	}
	return h
}

// hashChildren is segment.Blake3RFC6962.HashChildren on fixed-size hashes:
// BLAKE3(0x01 ‖ l ‖ r), without allocating.
func hashChildren(l, r *segment.Hash) segment.Hash {
	var buf [1 + 2*segment.HashSize]byte
	buf[0] = 0x01
	copy(buf[1:], l[:])
	copy(buf[1+segment.HashSize:], r[:])
	return blake3.Sum256(buf[:])
}
