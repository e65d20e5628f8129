package merge

import (
	"fmt"
	"iter"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/transparency-dev/merkle/compact"
)

// The merged-order root is the RFC 6962 Merkle root (CONTRACT §2's BLAKE3 hasher,
// segment.Blake3RFC6962) of the list of record hashes in merged order: leaf i
// is BLAKE3(0x00 ‖ hash of the record at position i+1). Two machines holding
// the same records compute the same root, so comparing merged views costs one
// hash; and because the leaves are record hashes, which cover anchor, seq and
// counter, the root also commits to the order. With a single anchor the
// merged order is that anchor's log and the root equals the anchor's tree
// root.

var rangeFactory = &compact.RangeFactory{Hash: segment.Blake3RFC6962.HashChildren}

// RootBuilder computes the merged-order root one record at a time in O(log n)
// memory (a compact range). The zero value is not usable; call NewRootBuilder.
type RootBuilder struct {
	rng *compact.Range
}

// NewRootBuilder returns a builder for an empty list.
func NewRootBuilder() *RootBuilder {
	return &RootBuilder{rng: rangeFactory.NewEmptyRange(0)}
}

// Append adds the next record, by its hash, to the list.
func (b *RootBuilder) Append(recordHash segment.Hash) {
	leaf := segment.LeafHash(recordHash)
	// NB: Append only fails on a corrupted range, which a RootBuilder never
	// holds: it is built here and only ever appended to.
	if err := b.rng.Append(leaf[:], nil); err != nil {
		panic(fmt.Sprintf("merge: compact range append: %v", err))
	}
}

// Size returns the number of records appended.
func (b *RootBuilder) Size() uint64 { return b.rng.End() }

// Root returns the root of the records appended so far; for none, the empty
// tree's root BLAKE3("").
func (b *RootBuilder) Root() segment.Hash {
	var h segment.Hash
	if b.rng.End() == 0 {
		copy(h[:], segment.Blake3RFC6962.EmptyRoot())
		return h
	}
	r, err := b.rng.GetRootHash(nil)
	if err != nil { // only for a range not starting at 0, which b never has
		panic(fmt.Sprintf("merge: compact range root: %v", err))
	}
	copy(h[:], r)
	return h
}

// Root drains a merge stream and returns its merged-order root and size. The
// stream must start at position 1 and be contiguous (no WithFrom, no
// WithBase): otherwise the root would be of a different list, and Root
// refuses with INPUT_001. An error in the stream is returned as is.
func Root(stream iter.Seq2[Positioned, error]) (segment.Hash, uint64, error) {
	b := NewRootBuilder()
	for p, err := range stream {
		if err != nil {
			return segment.Hash{}, 0, err
		}
		if want := b.Size() + 1; p.Pos != want {
			return segment.Hash{}, 0, errs.New(errs.CodeInvalidInput,
				"merged root: stream has position %d where %d belongs (it must start at 1 with no gaps)", p.Pos, want)
		}
		b.Append(p.Record.Hash)
	}
	return b.Root(), b.Size(), nil
}
