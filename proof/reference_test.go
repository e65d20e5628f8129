package proof

import (
	"encoding/binary"
	"math/bits"
	"testing"

	"github.com/anchordb/anchordb/segment"
	"github.com/zeebo/blake3"
)

// This file holds a naive RFC 6962 reference, written straight from the RFC
// with BLAKE3 and no code of this package or of transparency-dev/merkle.

func refLeaf(data []byte) []byte {
	h := blake3.Sum256(append([]byte{0x00}, data...))
	return h[:]
}

func refNode(l, r []byte) []byte {
	buf := append(append([]byte{0x01}, l...), r...)
	h := blake3.Sum256(buf)
	return h[:]
}

func refEmpty() []byte {
	h := blake3.Sum256(nil)
	return h[:]
}

// largestPow2Below returns the largest power of two strictly below n (n ≥ 2).
func largestPow2Below(n uint64) uint64 { return 1 << (bits.Len64(n-1) - 1) }

// refTree is the reference over a list of leaf hashes (already HashLeaf'ed),
// with a memo so that MTH of every size of a long list stays cheap; the memo
// does not change the definition.
type refTree struct {
	leaves [][]byte
	memo   map[[2]uint64][]byte
}

func newRefTree(leaves [][]byte) *refTree {
	return &refTree{leaves: leaves, memo: map[[2]uint64][]byte{}}
}

// mth is MTH(D[lo:hi]) of RFC 6962 §2.1.
func (t *refTree) mth(lo, hi uint64) []byte {
	n := hi - lo
	switch n {
	case 0:
		return refEmpty()
	case 1:
		return t.leaves[lo]
	}
	if h, ok := t.memo[[2]uint64{lo, hi}]; ok {
		return h
	}
	k := largestPow2Below(n)
	h := refNode(t.mth(lo, lo+k), t.mth(lo+k, hi))
	t.memo[[2]uint64{lo, hi}] = h
	return h
}

// path is PATH(m, D[lo:hi]) of RFC 6962 §2.1.1.
func (t *refTree) path(m, lo, hi uint64) [][]byte {
	n := hi - lo
	if n <= 1 {
		return [][]byte{}
	}
	k := largestPow2Below(n)
	if m < k {
		return append(t.path(m, lo, lo+k), t.mth(lo+k, hi))
	}
	return append(t.path(m-k, lo+k, hi), t.mth(lo, lo+k))
}

// subproof is SUBPROOF(m, D[lo:hi], b) of RFC 6962 §2.1.2.
func (t *refTree) subproof(m, lo, hi uint64, b bool) [][]byte {
	n := hi - lo
	if m == n {
		if b {
			return [][]byte{}
		}
		return [][]byte{t.mth(lo, hi)}
	}
	k := largestPow2Below(n)
	if m <= k {
		return append(t.subproof(m, lo, lo+k, b), t.mth(lo+k, hi))
	}
	return append(t.subproof(m-k, lo+k, hi, false), t.mth(lo, lo+k))
}

// consistency is PROOF(m, D[0:n]), empty when m is 0 or n.
func (t *refTree) consistency(m, n uint64) [][]byte {
	if m == 0 || m == n {
		return [][]byte{}
	}
	return t.subproof(m, 0, n, true)
}

// recordHash is a deterministic stand-in for the hash of record seq i+1.
func recordHash(i uint64) segment.Hash {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], i)
	return blake3.Sum256(append([]byte("record "), b[:]...))
}

// buildRecords returns a MemStore fed n records the way the engine feeds
// its store, and the reference over the same leaves.
func buildRecords(t testing.TB, n uint64) (*MemStore, *refTree) {
	t.Helper()
	st := NewMemStore()
	leaves := make([][]byte, n)
	for i := uint64(0); i < n; i++ {
		rh := recordHash(i)
		leaves[i] = refLeaf(rh[:])
		if err := st.Append(rh); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	return st, newRefTree(leaves)
}

// cheapLeaf is a synthetic leaf hash for big trees: no hashing at all.
func cheapLeaf(i uint64) []byte {
	b := make([]byte, segment.HashSize)
	binary.BigEndian.PutUint64(b, i)
	binary.BigEndian.PutUint64(b[8:], ^i)
	b[31] = 0xa5
	return b
}

// buildCheap returns a MemStore of n synthetic leaf hashes and its
// reference: only node hashes are computed.
func buildCheap(t testing.TB, n uint64) (*MemStore, *refTree) {
	t.Helper()
	st := NewMemStore()
	leaves := make([][]byte, n)
	for i := uint64(0); i < n; i++ {
		leaves[i] = cheapLeaf(i)
		if err := st.AppendLeafHash(leaves[i]); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	return st, newRefTree(leaves)
}

func equalHashes(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if string(a[i]) != string(b[i]) {
			return false
		}
	}
	return true
}

func TestReferenceMatchesSegmentHasher(t *testing.T) {
	rh := recordHash(7)
	if got, want := segment.Blake3RFC6962.HashLeaf(rh[:]), refLeaf(rh[:]); string(got) != string(want) {
		t.Fatalf("HashLeaf = %x, reference %x", got, want)
	}
	l, r := cheapLeaf(1), cheapLeaf(2)
	if got, want := segment.Blake3RFC6962.HashChildren(l, r), refNode(l, r); string(got) != string(want) {
		t.Fatalf("HashChildren = %x, reference %x", got, want)
	}
	if got, want := segment.Blake3RFC6962.EmptyRoot(), refEmpty(); string(got) != string(want) {
		t.Fatalf("EmptyRoot = %x, reference %x", got, want)
	}
}
