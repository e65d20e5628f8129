// Package treestore keeps each anchor's Merkle tree (docs/CONTRACT.md §2)
// in the index. The engine holds the tree as a compact range in memory,
// extended on every append; what proofs for any historical size need is
// persisted without a second copy of the leaves: level-0 nodes are the
// record hashes already in the 's' rows, and every perfect-subtree node at
// a level that is a multiple of 8 (subtrees of 256, 65,536, … leaves) is
// written to an 'n' row in the same batch as the record that completed it
// (Visitor). Any node is then at most 2^7 stored hashes away, like
// Tessera's 256-wide tiles. The tree arithmetic — rebuilding ranges, roots
// and proofs from stored nodes — is the proof package's; Index is how it
// reaches the index, and its failures carry the engine's codes (a node
// past the end of the tree is STATE_003, a hole or a malformed row INT_004,
// a read that fails IO_001).
package treestore

import (
	"context"
	"encoding/binary"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/transparency-dev/merkle/compact"
)

// Stored reports whether nodes at level are persisted in 'n' rows: the
// levels proof.StoredLevel names, except level 0, which the 's' rows hold.
func Stored(level uint) bool { return level > 0 && proof.StoredLevel(level) }

// Index is the proof.NodeStore of one anchor's tree over the index (or a
// Pebble snapshot of it, for a consistent view): level 0 from the 's'
// rows, levels 8, 16, … from the 'n' rows.
type Index struct {
	R      pebble.Reader
	Anchor string
}

var _ proof.NodeStore = Index{}

// Nodes returns the node hashes at level for indices [begin, end). Level 0
// returns leaf hashes (HashLeaf of the record hashes); other levels must be
// multiples of 8. A node past the end of the tree is STATE_003; a hole or a
// malformed row is INT_004.
func (s Index) Nodes(ctx context.Context, level uint, begin, end uint64) ([][]byte, error) {
	if end <= begin {
		return [][]byte{}, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var lower, upper []byte
	switch {
	case level == 0:
		lower, upper = schema.SeqKey(s.Anchor, begin+1), schema.SeqKey(s.Anchor, end+1)
	case Stored(level):
		lower, upper = schema.NodeKey(s.Anchor, uint8(level), begin), schema.NodeKey(s.Anchor, uint8(level), end)
	default:
		return nil, errs.New(errs.CodeInvalidInput, "tree level %d is not stored", level)
	}
	it, err := s.R.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "index iterator")
	}
	defer it.Close()
	out := make([][]byte, 0, end-begin)
	want := begin
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != len(lower) {
			// Between the bounds, yet not a row of this anchor and level
			// with an 8-byte index: a damaged key (keys of one table have
			// one length).
			return nil, errs.New(errs.CodeIndexMismatch, "anchor %q: tree level %d has a malformed index key %x", s.Anchor, level, k)
		}
		idx := binary.BigEndian.Uint64(k[len(k)-8:])
		if level == 0 {
			idx-- // seq → leaf index
		}
		if idx != want {
			return nil, errs.New(errs.CodeIndexMismatch, "anchor %q: tree node level %d index %d missing from the index", s.Anchor, level, want)
		}
		if level == 0 {
			e, err := schema.DecodeLocation(it.Value())
			if err != nil {
				return nil, errs.Wrap(errs.CodeIndexMismatch, err, "anchor %q seq %d", s.Anchor, idx+1)
			}
			h := segment.LeafHash(e.Hash)
			out = append(out, h[:])
		} else {
			if len(it.Value()) != segment.HashSize {
				return nil, errs.New(errs.CodeIndexMismatch, "anchor %q: tree node level %d index %d is %d bytes", s.Anchor, level, idx, len(it.Value()))
			}
			out = append(out, append([]byte(nil), it.Value()...))
		}
		want++
	}
	if err := it.Error(); err != nil {
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "index iterator")
	}
	if want != end {
		return nil, errs.New(errs.CodeDependencyMissing, "anchor %q: tree level %d has no node %d", s.Anchor, level, want)
	}
	return out, nil
}

// Load rebuilds the compact range of an anchor's first size leaves from r:
// one node per set bit of size.
func Load(ctx context.Context, r pebble.Reader, anchor string, size uint64) (*compact.Range, error) {
	return proof.LoadRange(ctx, Index{R: r, Anchor: anchor}, size)
}

// Visitor is the compact.VisitFn that extends an anchor's range and writes
// the nodes that must be stored (Stored) as 'n' rows into b.
func Visitor(b schema.RowSetter, anchor string) compact.VisitFn {
	return func(id compact.NodeID, hash []byte) {
		if Stored(id.Level) {
			_ = b.Set(schema.NodeKey(anchor, uint8(id.Level), id.Index), hash, nil)
		}
	}
}
