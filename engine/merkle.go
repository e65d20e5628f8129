package engine

import (
	"context"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/transparency-dev/merkle/compact"
)

// Each anchor's Merkle tree (SPEC §2) is kept as a compact range in memory,
// extended on every append. What proofs for any historical size need is
// persisted without a second copy of the leaves: level-0 nodes are the record
// hashes already in the 's' rows, and every perfect-subtree node at a level
// that is a multiple of 8 (subtrees of 256, 65,536, … leaves) is written to an
// 'n' row in the same batch as the record that completed it. Any node is then
// at most 2^7 stored hashes away, like Tessera's 256-wide tiles.

// storedNodeLevel reports whether nodes at level are persisted in 'n' rows.
func storedNodeLevel(level uint) bool { return level > 0 && level%8 == 0 }

// nodeStore reads an anchor's persisted tree nodes from the index (or from a
// Pebble snapshot when reader is one).
type nodeStore struct {
	r      pebble.Reader
	anchor string
}

// Nodes returns the node hashes at level for indices [begin, end). Level 0
// returns leaf hashes (HashLeaf of the record hashes); other levels must be
// multiples of 8.
func (s nodeStore) Nodes(_ context.Context, level uint, begin, end uint64) ([][]byte, error) {
	if end <= begin {
		return nil, nil
	}
	out := make([][]byte, 0, end-begin)
	var lower, upper []byte
	if level == 0 {
		lower, upper = seqKey(s.anchor, begin+1), seqKey(s.anchor, end+1)
	} else {
		if !storedNodeLevel(level) {
			return nil, errs.New(errs.CodeInvalidInput, "tree level %d is not stored", level)
		}
		lower, upper = nodeKey(s.anchor, uint8(level), begin), nodeKey(s.anchor, uint8(level), end)
	}
	it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "index iterator")
	}
	defer it.Close()
	want := begin
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		idx := be.Uint64(k[len(k)-8:])
		if level == 0 {
			idx-- // seq → leaf index
		}
		if idx != want {
			return nil, errs.New(errs.CodeIndexMismatch, "anchor %q: tree node level %d index %d missing from the index", s.anchor, level, want)
		}
		if level == 0 {
			e, err := decodeSeqEntry(it.Value())
			if err != nil {
				return nil, errs.Wrap(errs.CodeIndexMismatch, err, "anchor %q seq %d", s.anchor, idx+1)
			}
			h := segment.LeafHash(e.Hash)
			out = append(out, h[:])
		} else {
			if len(it.Value()) != segment.HashSize {
				return nil, errs.New(errs.CodeIndexMismatch, "anchor %q: tree node level %d index %d is %d bytes", s.anchor, level, idx, len(it.Value()))
			}
			out = append(out, append([]byte(nil), it.Value()...))
		}
		want++
	}
	if err := it.Error(); err != nil {
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "index iterator")
	}
	if want != end {
		return nil, errs.New(errs.CodeDependencyMissing, "anchor %q: tree level %d has no node %d", s.anchor, level, want)
	}
	return out, nil
}

// nodeHash computes the hash of the perfect subtree id from the nearest
// stored level at or below it.
func nodeHash(ctx context.Context, s nodeStore, id compact.NodeID) ([]byte, error) {
	base := id.Level - id.Level%8
	if storedNodeLevel(id.Level) {
		hs, err := s.Nodes(ctx, id.Level, id.Index, id.Index+1)
		if err != nil {
			return nil, err
		}
		return hs[0], nil
	}
	width := uint64(1) << (id.Level - base)
	hs, err := s.Nodes(ctx, base, id.Index*width, (id.Index+1)*width)
	if err != nil {
		return nil, err
	}
	for len(hs) > 1 {
		for i := 0; i < len(hs)/2; i++ {
			hs[i] = segment.Blake3RFC6962.HashChildren(hs[2*i], hs[2*i+1])
		}
		hs = hs[:len(hs)/2]
	}
	return hs[0], nil
}

// loadTree rebuilds the compact range of an anchor's first size leaves from
// the index: one node per set bit of size.
func (db *DB) loadTree(id string, size uint64) (*compact.Range, error) {
	return loadTreeFrom(context.Background(), nodeStore{r: db.index, anchor: id}, size)
}

func loadTreeFrom(ctx context.Context, s nodeStore, size uint64) (*compact.Range, error) {
	var hashes [][]byte
	var begin uint64
	for level := 63; level >= 0; level-- {
		if size&(1<<uint(level)) == 0 {
			continue
		}
		id := compact.NewNodeID(uint(level), begin>>uint(level))
		h, err := nodeHash(ctx, s, id)
		if err != nil {
			return nil, err
		}
		hashes = append(hashes, h)
		begin += 1 << uint(level)
	}
	return merkleFactory.NewRange(0, size, hashes)
}

// treeAppender extends an anchor's compact range and emits the nodes that
// must be stored into the batch.
type treeAppender struct {
	batch  *pebble.Batch
	anchor string
}

func (t treeAppender) visit(id compact.NodeID, hash []byte) {
	if storedNodeLevel(id.Level) {
		_ = t.batch.Set(nodeKey(t.anchor, uint8(id.Level), id.Index), hash, nil)
	}
}
