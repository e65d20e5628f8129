package engine

import (
	"github.com/anchordb/anchordb/segment"
	"github.com/zeebo/blake3"
)

// merkleTree recomputes an anchor tree from its leaves while verification
// streams over the chain. It is a compact range starting at leaf 0 — one
// perfect-subtree root per set bit of size, largest first — kept in a fixed
// array, so extending it allocates nothing (compact.Range allocates every
// node hash, which shows at a record's cost). Its nodes and roots are those
// of compact.Range with segment.Blake3RFC6962 (verify_tree_test.go checks).
type merkleTree struct {
	size  uint64
	n     int
	stack [64]segment.Hash
}

// merkleTreeFrom is the tree of size leaves whose compact range hashes are
// hashes (compact.Range.Hashes of a range from 0), which must have one hash
// per set bit of size.
func merkleTreeFrom(hashes [][]byte, size uint64) merkleTree {
	t := merkleTree{size: size}
	for _, h := range hashes {
		copy(t.stack[t.n][:], h)
		t.n++
	}
	return t
}

// append adds a leaf hash (segment.LeafHash of a record hash). visit, if not
// nil, sees every perfect-subtree node the leaf completes, bottom up, as
// compact.Range's Append visitor reports them (level ≥ 1).
func (t *merkleTree) append(leaf segment.Hash, visit func(level uint, index uint64, h *segment.Hash)) {
	h := leaf
	idx := t.size
	level := uint(0)
	for (t.size>>level)&1 == 1 {
		t.n--
		h = hashChildren(&t.stack[t.n], &h)
		level++
		if visit != nil {
			visit(level, idx>>level, &h)
		}
	}
	t.stack[t.n] = h
	t.n++
	t.size++
}

// root returns the RFC 6962 root: the empty root for no leaves, else the
// stack folded from the right.
func (t *merkleTree) root() segment.Hash {
	if t.n == 0 {
		return blake3.Sum256(nil)
	}
	h := t.stack[t.n-1]
	for i := t.n - 2; i >= 0; i-- {
		h = hashChildren(&t.stack[i], &h)
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
