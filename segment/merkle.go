package segment

import (
	"github.com/zeebo/blake3"
)

// MerkleHasher is the RFC 6962/9162 tree hasher of CONTRACT §2 with BLAKE3-256 in
// plain hash mode in place of SHA-256:
//
//	empty tree  BLAKE3("")
//	leaf        BLAKE3(0x00 ‖ leaf data)      leaf data = the record hash
//	node        BLAKE3(0x01 ‖ left ‖ right)
//
// It implements transparency-dev/merkle's LogHasher, so that package's proof
// verification works on anchordb trees unchanged. It lives here, at the
// bottom of the import graph, because proofs, the merged-order root and
// snapshots all hash with it.
type MerkleHasher struct{}

// Blake3RFC6962 is the hasher value to pass to merkle/proof and merkle/compact.
var Blake3RFC6962 MerkleHasher

// EmptyRoot returns BLAKE3 of the empty string.
func (MerkleHasher) EmptyRoot() []byte {
	h := blake3.Sum256(nil)
	return h[:]
}

// HashLeaf returns BLAKE3(0x00 ‖ leaf).
func (MerkleHasher) HashLeaf(leaf []byte) []byte {
	h := blake3.New()
	_, _ = h.Write([]byte{0x00})
	_, _ = h.Write(leaf)
	return h.Sum(make([]byte, 0, HashSize))
}

// HashChildren returns BLAKE3(0x01 ‖ l ‖ r).
func (MerkleHasher) HashChildren(l, r []byte) []byte {
	var buf [1 + 2*HashSize]byte
	buf[0] = 0x01
	if len(l) == HashSize && len(r) == HashSize {
		copy(buf[1:], l)
		copy(buf[1+HashSize:], r)
		h := blake3.Sum256(buf[:])
		return h[:]
	}
	h := blake3.New()
	_, _ = h.Write(buf[:1])
	_, _ = h.Write(l)
	_, _ = h.Write(r)
	return h.Sum(nil)
}

// Size returns 32.
func (MerkleHasher) Size() int { return HashSize }

// LeafHash is HashLeaf of a record hash, as a Hash.
func LeafHash(recordHash Hash) Hash {
	var buf [1 + HashSize]byte
	copy(buf[1:], recordHash[:])
	return blake3.Sum256(buf[:])
}
