package proof

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/zeebo/blake3"
)

// Entry is one anchor in a frontier commitment: the anchor's log size and
// the root of its Merkle tree at that size.
type Entry struct {
	Anchor string
	Size   uint64
	Root   segment.Hash
}

// frontierLeafFixed is the size of a frontier leaf without the anchor id.
const frontierLeafFixed = 2 + 8 + segment.HashSize

// FrontierLeaf returns the leaf data of e in the frontier tree (CONTRACT §5):
//
//	offset  size  field
//	0       2     n = len(anchor id), uint16 big-endian (1..255)
//	2       n     anchor id, raw UTF-8 bytes
//	2+n     8     size, uint64 big-endian
//	10+n    32    root, the anchor tree's BLAKE3-256 RFC 6962 root at size
//
// The leaf hash is HashLeaf(data) = BLAKE3(0x00 ‖ data). A frontier leaf is
// at least 43 bytes, so it never equals the 32-byte leaf data (a record
// hash) of an anchor tree. Precondition: e passes ValidateEntry (INPUT_001).
func FrontierLeaf(e Entry) ([]byte, error) {
	if err := ValidateEntry(e); err != nil {
		return nil, err
	}
	return appendFrontierLeaf(make([]byte, 0, frontierLeafFixed+len(e.Anchor)), e), nil
}

func appendFrontierLeaf(dst []byte, e Entry) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(e.Anchor)))
	dst = append(dst, e.Anchor...)
	dst = binary.BigEndian.AppendUint64(dst, e.Size)
	return append(dst, e.Root[:]...)
}

// emptyRoot is BLAKE3(""), the root of an empty tree.
func emptyRoot() segment.Hash {
	var h segment.Hash
	copy(h[:], segment.Blake3RFC6962.EmptyRoot())
	return h
}

// ValidateEntry checks one entry: a valid anchor id (CONTRACT §1), and the empty
// root BLAKE3("") when the size is 0. Failures are INPUT_001.
func ValidateEntry(e Entry) error {
	if err := segment.ValidateAnchorID(e.Anchor); err != nil {
		return err
	}
	if e.Size == 0 && e.Root != emptyRoot() {
		return errs.New(errs.CodeInvalidInput, "anchor %q has size 0 but root %s, not the empty root", e.Anchor, e.Root)
	}
	return nil
}

// SortEntries sorts entries by anchor id as raw bytes, the order of the
// frontier tree.
func SortEntries(entries []Entry) {
	slices.SortFunc(entries, func(a, b Entry) int { return strings.Compare(a.Anchor, b.Anchor) })
}

// ValidateEntries checks every entry with ValidateEntry and that the anchor
// ids are strictly increasing as raw bytes (sorted, no duplicates).
// Failures are INPUT_001.
func ValidateEntries(entries []Entry) error {
	for i, e := range entries {
		if err := ValidateEntry(e); err != nil {
			return fmt.Errorf("frontier entry %d: %w", i, err)
		}
		if i > 0 && entries[i-1].Anchor >= e.Anchor {
			return errs.New(errs.CodeInvalidInput, "frontier entries %d and %d are not in strictly increasing anchor order (%q, %q)", i-1, i, entries[i-1].Anchor, e.Anchor)
		}
	}
	return nil
}

// frontierLeafHashes validates entries and passes the leaf hash of each, in
// order, to each.
func frontierLeafHashes(entries []Entry, each func(leafHash []byte) error) error {
	if err := ValidateEntries(entries); err != nil {
		return err
	}
	// NB: BLAKE3(0x00 ‖ leaf) in one call is HashLeaf without a streaming
	// hasher per leaf, which halves the cost over 10,000 anchors.
	buf := make([]byte, 0, 1+frontierLeafFixed+segment.MaxAnchorID)
	for _, e := range entries {
		buf = appendFrontierLeaf(append(buf[:0], 0x00), e)
		h := blake3.Sum256(buf)
		if err := each(h[:]); err != nil {
			return err
		}
	}
	return nil
}

// FrontierRoot returns the frontier root over entries: the RFC 6962 BLAKE3
// root of the tree whose leaf i is FrontierLeaf(entries[i]); BLAKE3("") when
// there are none. Precondition: ValidateEntries(entries) (INPUT_001).
func FrontierRoot(entries []Entry) (segment.Hash, error) {
	var out segment.Hash
	if len(entries) == 0 {
		return emptyRoot(), nil
	}
	r := NewRange()
	err := frontierLeafHashes(entries, func(h []byte) error { return r.Append(h, nil) })
	if err != nil {
		return out, err
	}
	root, err := r.GetRootHash(nil)
	if err != nil {
		return out, errs.Wrap(errs.CodeInvalidInput, err, "frontier root")
	}
	copy(out[:], root)
	return out, nil
}

// ProveFrontier returns the proof that anchor's entry is leaf of the
// frontier tree over entries, with Root the frontier root. Origin is left
// empty (Checkpoint.ProveAnchor fills it in). Preconditions:
// ValidateEntries(entries) (INPUT_001); anchor is among them (STATE_003).
func ProveFrontier(entries []Entry, anchor string) (*FrontierProof, error) {
	idx, found := slices.BinarySearchFunc(entries, anchor, func(e Entry, a string) int { return strings.Compare(e.Anchor, a) })
	st := NewMemStore()
	if err := frontierLeafHashes(entries, st.AppendLeafHash); err != nil {
		return nil, err
	}
	if !found {
		return nil, errs.New(errs.CodeDependencyMissing, "anchor %q is not in the frontier (%d anchors)", anchor, len(entries))
	}
	n := uint64(len(entries))
	path, err := Inclusion(context.Background(), st, uint64(idx), n)
	if err != nil {
		return nil, fmt.Errorf("frontier proof of anchor %q: %w", anchor, err)
	}
	e := entries[idx]
	return &FrontierProof{
		Anchor:     e.Anchor,
		Size:       e.Size,
		AnchorRoot: e.Root,
		Index:      uint64(idx),
		Anchors:    n,
		Root:       st.Root(),
		Proof:      toHashes(path),
	}, nil
}
