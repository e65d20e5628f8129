package proof

import (
	"context"
	"fmt"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/transparency-dev/merkle/compact"
	merkleproof "github.com/transparency-dev/merkle/proof"
)

// NodeHash returns the hash of the perfect subtree id, read from the nearest
// stored level at or below id.Level: one stored node when StoredLevel(id.Level),
// otherwise 2^(id.Level mod TileHeight) ≤ 128 nodes of the level below,
// hashed pairwise up to id.
//
// Preconditions: id.Level ≤ MaxLevel and the subtree ends within a tree of
// 2^64-1 leaves (INPUT_001 otherwise); the tree in st must hold every leaf of the subtree
// (STATE_003 otherwise, from the store). The result is a fresh slice owned
// by the caller, as are the hashes returned by Inclusion, Consistency and
// RootAt.
func NodeHash(ctx context.Context, st NodeStore, id compact.NodeID) ([]byte, error) {
	if id.Level > MaxLevel {
		return nil, errs.New(errs.CodeInvalidInput, "tree level %d is above %d", id.Level, MaxLevel)
	}
	if id.Index >= (^uint64(0))>>id.Level {
		return nil, errs.New(errs.CodeInvalidInput, "node %d at level %d ends beyond the largest tree (2^64-1 leaves)", id.Index, id.Level)
	}
	base := id.Level - id.Level%TileHeight
	width := uint64(1) << (id.Level - base) // ≤ 128
	begin := id.Index << (id.Level - base)
	// NB: begin+width cannot overflow: id.Index+1 ≤ (2^64-1)>>id.Level, so the
	// subtree ends at or before leaf 2^64-1 and its base-level end fits too.
	hs, err := fetch(ctx, st, base, begin, begin+width)
	if err != nil {
		return nil, fmt.Errorf("node %d at level %d: %w", id.Index, id.Level, err)
	}
	if len(hs) == 1 {
		// NB: a stored node may alias the store's memory; callers get their
		// own copy, so a proof they edit can never corrupt the store.
		return append(make([]byte, 0, segment.HashSize), hs[0]...), nil
	}
	for len(hs) > 1 {
		for i := 0; i < len(hs)/2; i++ {
			hs[i] = segment.Blake3RFC6962.HashChildren(hs[2*i], hs[2*i+1])
		}
		hs = hs[:len(hs)/2]
	}
	return hs[0], nil
}

// fetch reads stored nodes and checks the store kept its contract.
func fetch(ctx context.Context, st NodeStore, level uint, begin, end uint64) ([][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	hs, err := st.Nodes(ctx, level, begin, end)
	if err != nil {
		return nil, err
	}
	if uint64(len(hs)) < end-begin {
		return nil, errs.New(errs.CodeDependencyMissing, "store has %d of the %d nodes [%d, %d) at level %d", len(hs), end-begin, begin, end, level)
	}
	if uint64(len(hs)) > end-begin {
		return nil, errs.New(errs.CodeIndexMismatch, "store returned %d nodes for [%d, %d) at level %d", len(hs), begin, end, level)
	}
	for i, h := range hs {
		if len(h) != segment.HashSize {
			return nil, errs.New(errs.CodeIndexMismatch, "store returned a %d-byte hash for node %d at level %d", len(h), begin+uint64(i), level)
		}
	}
	return hs, nil
}

// nodeHashes returns NodeHash of every id, in order.
func nodeHashes(ctx context.Context, st NodeStore, ids []compact.NodeID) ([][]byte, error) {
	out := make([][]byte, len(ids))
	for i, id := range ids {
		h, err := NodeHash(ctx, st, id)
		if err != nil {
			return nil, err
		}
		out[i] = h
	}
	return out, nil
}

// checkSize makes sure the tree in st has at least size leaves by reading
// leaf size-1. Proof paths that touch the last leaf check it on the way; the
// trivial ones (an empty proof) need this one read.
func checkSize(ctx context.Context, st NodeStore, size uint64) error {
	if size == 0 {
		return nil
	}
	if _, err := fetch(ctx, st, 0, size-1, size); err != nil {
		return fmt.Errorf("tree size %d: %w", size, err)
	}
	return nil
}

// LoadRange returns the compact range of the first size leaves of the tree
// in st — one NodeHash per set bit of size — ready to be extended with
// Append. It is how the engine rebuilds an anchor's in-memory range on open.
// A tree with fewer than size leaves gives STATE_003.
func LoadRange(ctx context.Context, st NodeStore, size uint64) (*compact.Range, error) {
	ids := compact.RangeNodes(0, size, make([]compact.NodeID, 0, compact.RangeSize(0, size)))
	hashes, err := nodeHashes(ctx, st, ids)
	if err != nil {
		return nil, fmt.Errorf("tree range at size %d: %w", size, err)
	}
	r, err := rangeFactory.NewRange(0, size, hashes)
	if err != nil {
		return nil, errs.Wrap(errs.CodeIndexMismatch, err, "tree range at size %d", size)
	}
	return r, nil
}

// RootAt returns the RFC 6962 root of the first size leaves of the tree in
// st: BLAKE3("") for size 0 (no store access). A tree with fewer than size
// leaves gives STATE_003.
func RootAt(ctx context.Context, st NodeStore, size uint64) ([]byte, error) {
	if size == 0 {
		return segment.Blake3RFC6962.EmptyRoot(), nil
	}
	r, err := LoadRange(ctx, st, size)
	if err != nil {
		return nil, err
	}
	root, err := r.GetRootHash(nil)
	if err != nil {
		return nil, errs.Wrap(errs.CodeIndexMismatch, err, "tree root at size %d", size)
	}
	return root, nil
}

// Inclusion returns the RFC 9162 inclusion proof of leaf index (seq index+1)
// in the tree of the given size: the sibling hashes from the leaf upward,
// as merkle/proof.VerifyInclusion expects them.
//
// Preconditions: index < size, else STATE_003 (the seq is not in the tree at
// that size); the tree in st must hold size leaves, else STATE_003.
func Inclusion(ctx context.Context, st NodeStore, index, size uint64) ([][]byte, error) {
	if index >= size {
		return nil, errs.New(errs.CodeDependencyMissing, "leaf %d (seq %d) is not in a tree of size %d", index, index+1, size)
	}
	nodes, err := merkleproof.Inclusion(index, size)
	if err != nil {
		return nil, errs.Wrap(errs.CodeInvalidInput, err, "inclusion proof of leaf %d at size %d", index, size)
	}
	hashes, err := nodeHashes(ctx, st, nodes.IDs)
	if err != nil {
		return nil, fmt.Errorf("inclusion proof of leaf %d at size %d: %w", index, size, err)
	}
	p, err := nodes.Rehash(hashes, segment.Blake3RFC6962.HashChildren)
	if err != nil {
		return nil, errs.Wrap(errs.CodeIndexMismatch, err, "inclusion proof of leaf %d at size %d", index, size)
	}
	return p, nil
}

// Consistency returns the RFC 9162 consistency proof between tree sizes
// size1 and size2, as merkle/proof.VerifyConsistency expects it. It is empty
// (not nil) when size1 == size2 or size1 == 0.
//
// Preconditions: size1 ≤ size2, else INPUT_001; the tree in st must hold
// size2 leaves, else STATE_003 (checked even when the proof is empty).
func Consistency(ctx context.Context, st NodeStore, size1, size2 uint64) ([][]byte, error) {
	if size1 > size2 {
		return nil, errs.New(errs.CodeInvalidInput, "consistency proof from size %d down to %d", size1, size2)
	}
	nodes, err := merkleproof.Consistency(size1, size2)
	if err != nil {
		return nil, errs.Wrap(errs.CodeInvalidInput, err, "consistency proof from size %d to %d", size1, size2)
	}
	if len(nodes.IDs) == 0 {
		if err := checkSize(ctx, st, size2); err != nil {
			return nil, fmt.Errorf("consistency proof from size %d: %w", size1, err)
		}
		return [][]byte{}, nil
	}
	hashes, err := nodeHashes(ctx, st, nodes.IDs)
	if err != nil {
		return nil, fmt.Errorf("consistency proof from size %d to %d: %w", size1, size2, err)
	}
	p, err := nodes.Rehash(hashes, segment.Blake3RFC6962.HashChildren)
	if err != nil {
		return nil, errs.Wrap(errs.CodeIndexMismatch, err, "consistency proof from size %d to %d", size1, size2)
	}
	return p, nil
}

// ProveInclusion returns the CONTRACT §10 inclusion proof of the record with
// hash recordHash at seq of anchor, in the anchor's tree of the given size
// served by st. The root is the one the proof hashes up to, which equals
// RootAt(size) when the store is sound.
//
// Preconditions: a valid anchor id and seq ≥ 1 (INPUT_001); seq ≤ size and a
// tree of at least size leaves (STATE_003). recordHash must be the hash of
// that record: the leaf in st is checked against it (INT_004 if they differ).
func ProveInclusion(ctx context.Context, st NodeStore, anchor string, seq, size uint64, recordHash segment.Hash) (*InclusionProof, error) {
	if err := segment.ValidateAnchorID(anchor); err != nil {
		return nil, err
	}
	if seq == 0 {
		return nil, errs.New(errs.CodeInvalidInput, "seq 0 does not exist (seqs start at 1)").At(anchor, 0, "", 0)
	}
	if seq > size {
		return nil, errs.New(errs.CodeDependencyMissing, "seq %d is not in the tree of size %d", seq, size).At(anchor, seq, "", 0)
	}
	leaves, err := fetch(ctx, st, 0, seq-1, seq)
	if err != nil {
		return nil, fmt.Errorf("anchor %q seq %d: %w", anchor, seq, err)
	}
	leaf := segment.LeafHash(recordHash)
	if string(leaves[0]) != string(leaf[:]) {
		return nil, errs.New(errs.CodeIndexMismatch, "tree leaf of seq %d is not HashLeaf of record hash %s", seq, recordHash).At(anchor, seq, "", 0)
	}
	path, err := Inclusion(ctx, st, seq-1, size)
	if err != nil {
		return nil, fmt.Errorf("anchor %q: %w", anchor, err)
	}
	root, err := merkleproof.RootFromInclusionProof(segment.Blake3RFC6962, seq-1, size, leaf[:], path)
	if err != nil {
		return nil, errs.Wrap(errs.CodeIndexMismatch, err, "anchor %q seq %d at size %d", anchor, seq, size)
	}
	p := &InclusionProof{Anchor: anchor, Seq: seq, Size: size, Leaf: recordHash, Proof: toHashes(path)}
	copy(p.Root[:], root)
	return p, nil
}

// ProveConsistency returns the CONTRACT §10 consistency proof of anchor's tree
// between oldSize and newSize, with both roots, from st.
//
// Preconditions: a valid anchor id and oldSize ≤ newSize (INPUT_001); a tree
// of at least newSize leaves (STATE_003).
func ProveConsistency(ctx context.Context, st NodeStore, anchor string, oldSize, newSize uint64) (*ConsistencyProof, error) {
	if err := segment.ValidateAnchorID(anchor); err != nil {
		return nil, err
	}
	path, err := Consistency(ctx, st, oldSize, newSize)
	if err != nil {
		return nil, fmt.Errorf("anchor %q: %w", anchor, err)
	}
	oldRoot, err := RootAt(ctx, st, oldSize)
	if err != nil {
		return nil, fmt.Errorf("anchor %q: %w", anchor, err)
	}
	newRoot, err := RootAt(ctx, st, newSize)
	if err != nil {
		return nil, fmt.Errorf("anchor %q: %w", anchor, err)
	}
	p := &ConsistencyProof{Anchor: anchor, OldSize: oldSize, NewSize: newSize, Proof: toHashes(path)}
	copy(p.OldRoot[:], oldRoot)
	copy(p.NewRoot[:], newRoot)
	return p, nil
}
