package proof

import (
	"context"
	"sync"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/transparency-dev/merkle/compact"
)

// TileHeight is the distance between stored tree levels: a store keeps level
// 0 and every level that is a multiple of TileHeight, so a node is at most
// 2^(TileHeight-1) stored hashes away (like Tessera's 256-wide tiles).
const TileHeight = 8

// MaxLevel is the highest tree level a uint64-indexed tree can have.
const MaxLevel = 63

// NodeStore serves the stored nodes of one anchor's Merkle tree.
//
// Nodes returns the hashes of the nodes at tree level level with indices
// [begin, end), in index order. The contract:
//
//   - level is 0 or a multiple of TileHeight (StoredLevel(level) is true);
//     callers in this package never ask for other levels, and a store may
//     refuse them with INPUT_001.
//   - Level 0 holds leaf hashes, i.e. HashLeaf(record hash) — already hashed,
//     not the record hashes themselves. Level L > 0 holds the root of the
//     perfect subtree over leaves [i·2^L, (i+1)·2^L), exactly the hash the
//     compact.Range Append visitor reported for NodeID{L, i}.
//   - begin <= end. begin == end returns an empty result and no error.
//   - On success it returns exactly end-begin hashes of segment.HashSize bytes.
//     A node that does not exist (the tree has fewer than (i+1)·2^L leaves)
//     is an error with code STATE_003 (dependency_missing); a short result
//     without error is treated the same way by this package.
//   - The caller owns the returned outer slice and may overwrite its
//     elements; it never writes into the hash bytes, so a store may return
//     slices of its own memory. The store must not change those bytes later.
//   - It honours ctx and is safe for concurrent use if the caller shares it.
type NodeStore interface {
	Nodes(ctx context.Context, level uint, begin, end uint64) ([][]byte, error)
}

// StoredLevel reports whether a NodeStore keeps the nodes of a tree level:
// level 0 (the leaf hashes) and every multiple of TileHeight up to MaxLevel.
func StoredLevel(level uint) bool {
	return level <= MaxLevel && level%TileHeight == 0
}

// StoredNode reports whether the node id must be persisted by a store that
// is fed through the compact.Range Append visitor: StoredLevel(id.Level).
// An engine that already keeps the leaf (level 0) hashes elsewhere — anchordb
// keeps record hashes and applies HashLeaf when serving level 0 — persists
// only the nodes with id.Level > 0 for which this is true.
func StoredNode(id compact.NodeID) bool { return StoredLevel(id.Level) }

// VisitStored returns a compact.VisitFn for (*compact.Range).Append that
// passes to put exactly the nodes a NodeStore must keep (StoredNode true) and
// drops the rest. put runs synchronously inside Append; hash is retained by
// the range and must not be modified (copy it if the storage layer reuses or
// mutates buffers).
//
// What Append reports, and so what put sees, for a range that starts at 0
// and grows one leaf at a time (compact/range.go, merkle v0.0.2):
//
//   - first NodeID{0, i} with the hash passed to Append (the leaf hash),
//   - then, bottom-up, every perfect-subtree node this leaf completes:
//     NodeID{l, i>>l} for l = 1 … trailing ones of i, each exactly once.
//
// Over the life of the range every node of every perfect subtree is reported
// exactly once, before Append returns, and never an ephemeral (imperfect)
// node. GetRootHash's visitor reports ephemeral nodes: never persist those.
// AppendRange reports only the merge nodes it creates, not the nodes of the
// appended range, so a store fed with AppendRange must persist those itself.
func VisitStored(put func(id compact.NodeID, hash []byte)) compact.VisitFn {
	return func(id compact.NodeID, hash []byte) {
		if StoredNode(id) {
			put(id, hash)
		}
	}
}

// rangeFactory builds compact ranges with the BLAKE3 RFC 6962 node hash.
// Ranges from different factories cannot be merged, so every range of this
// package and its users comes from this one (see NewRange).
var rangeFactory = &compact.RangeFactory{Hash: segment.Blake3RFC6962.HashChildren}

// NewRange returns an empty compact range starting at leaf 0 that hashes
// with segment.Blake3RFC6962. Append leaf hashes (HashLeaf of record hashes).
func NewRange() *compact.Range { return rangeFactory.NewEmptyRange(0) }

// MemStore is an in-memory NodeStore for one tree, fed leaves in order. It is
// the reference for how the engine must feed its own store: every leaf goes
// through (*compact.Range).Append with VisitStored, which keeps levels 0, 8,
// 16, … . It is safe for concurrent use.
type MemStore struct {
	mu  sync.RWMutex
	rng *compact.Range
	// levels[k] holds the nodes of tree level k·TileHeight, concatenated in
	// index order, segment.HashSize bytes each.
	levels [][]byte
	err    error // a broken invariant; the store refuses further appends
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore {
	return &MemStore{rng: NewRange()}
}

// Append adds the leaf for the next record: HashLeaf(recordHash).
func (m *MemStore) Append(recordHash segment.Hash) error {
	h := segment.LeafHash(recordHash)
	return m.AppendLeafHash(h[:])
}

// AppendLeafHash adds a leaf whose hash (already HashLeaf'ed) is leafHash,
// which must be segment.HashSize bytes; it is copied.
func (m *MemStore) AppendLeafHash(leafHash []byte) error {
	if len(leafHash) != segment.HashSize {
		return errs.New(errs.CodeInvalidInput, "leaf hash is %d bytes, want %d", len(leafHash), segment.HashSize)
	}
	leaf := append(make([]byte, 0, segment.HashSize), leafHash...)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return m.err
	}
	err := m.rng.Append(leaf, VisitStored(m.put))
	if err == nil {
		err = m.err
	}
	if err != nil {
		m.err = errs.Wrap(errs.CodeIndexMismatch, err, "memory tree at size %d", m.rng.End())
		return m.err
	}
	return nil
}

// put records a stored node; m.mu is held.
func (m *MemStore) put(id compact.NodeID, hash []byte) {
	k := int(id.Level / TileHeight)
	for len(m.levels) <= k {
		m.levels = append(m.levels, nil)
	}
	// NB: Append reports nodes in index order per level; anything else means
	// the range and the store disagree, and serving from here would be wrong.
	if n := uint64(len(m.levels[k]) / segment.HashSize); n != id.Index || len(hash) != segment.HashSize {
		if m.err == nil {
			m.err = errs.New(errs.CodeIndexMismatch, "visitor reported node %d at level %d (%d bytes), want node %d", id.Index, id.Level, len(hash), n)
		}
		return
	}
	m.levels[k] = append(m.levels[k], hash...)
}

// Size returns the number of leaves.
func (m *MemStore) Size() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.rng.End()
}

// Root returns the tree root at the current size (BLAKE3("") when empty).
func (m *MemStore) Root() segment.Hash {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out segment.Hash
	root, err := m.rng.GetRootHash(nil)
	if err != nil || root == nil {
		// A range from NewRange starts at 0, so the only nil root is the
		// empty tree.
		root = segment.Blake3RFC6962.EmptyRoot()
	}
	copy(out[:], root)
	return out
}

// Nodes implements NodeStore. The returned hashes alias the store's memory
// (capacity-limited) and must not be modified.
func (m *MemStore) Nodes(ctx context.Context, level uint, begin, end uint64) ([][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !StoredLevel(level) {
		return nil, errs.New(errs.CodeInvalidInput, "tree level %d is not stored (only 0 and multiples of %d)", level, TileHeight)
	}
	if begin > end {
		return nil, errs.New(errs.CodeInvalidInput, "node range [%d, %d) is reversed", begin, end)
	}
	if begin == end {
		return [][]byte{}, nil
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	var lvl []byte
	if k := int(level / TileHeight); k < len(m.levels) {
		lvl = m.levels[k]
	}
	if have := uint64(len(lvl) / segment.HashSize); end > have {
		return nil, errs.New(errs.CodeDependencyMissing, "tree of %d leaves has %d nodes at level %d; asked for [%d, %d)", m.rng.End(), have, level, begin, end)
	}
	out := make([][]byte, 0, end-begin)
	for i := begin; i < end; i++ {
		off := i * segment.HashSize
		out = append(out, lvl[off:off+segment.HashSize:off+segment.HashSize])
	}
	return out, nil
}
