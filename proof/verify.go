package proof

import (
	"errors"
	"fmt"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	merkleproof "github.com/transparency-dev/merkle/proof"
)

// VerifyInclusionProof checks p offline: HashLeaf(p.Leaf) at index p.Seq-1
// with the path p.Proof hashes up to p.Root in a tree of p.Size leaves
// (merkle/proof.VerifyInclusion with segment.Blake3RFC6962).
//
// A nil proof, an invalid anchor id, or a Seq outside 1..Size is INPUT_001.
// A proof that does not verify — wrong root, leaf, path or path length — is
// an *errs.Error with code INT_001 located at (Anchor, Seq) whose cause is
// the merkle/proof error (a proof.RootMismatchError when only hashes differ).
// It proves nothing about whether p.Root is trustworthy, and it binds p.Size
// only through p.Root (RFC 9162 paths of two sizes can have the same shape):
// compare (Size, Root) with a signed checkpoint entry or a consistency proof.
func VerifyInclusionProof(p *InclusionProof) error {
	if p == nil {
		return errs.New(errs.CodeInvalidInput, "no inclusion proof")
	}
	if err := segment.ValidateAnchorID(p.Anchor); err != nil {
		return fmt.Errorf("inclusion proof: %w", err)
	}
	if p.Seq == 0 || p.Seq > p.Size {
		return errs.New(errs.CodeInvalidInput, "inclusion proof of seq %d in a tree of size %d: seq must be in 1..size", p.Seq, p.Size).At(p.Anchor, p.Seq, "", 0)
	}
	leaf := segment.LeafHash(p.Leaf)
	err := merkleproof.VerifyInclusion(segment.Blake3RFC6962, p.Seq-1, p.Size, leaf[:], fromHashes(p.Proof), p.Root[:])
	if err != nil {
		return errs.Wrap(errs.CodeHashMismatch, MerkleError(err), "inclusion proof of anchor %q seq %d at size %d does not verify against root %s", p.Anchor, p.Seq, p.Size, p.Root).At(p.Anchor, p.Seq, "", 0)
	}
	return nil
}

// VerifyConsistencyProof checks p offline with merkle/proof.VerifyConsistency:
// the tree of p.OldSize leaves with root p.OldRoot is a prefix of the tree of
// p.NewSize leaves with root p.NewRoot. When OldSize is 0, OldRoot must be
// the empty root BLAKE3("") (any tree extends the empty one, so nothing is
// learned about NewRoot); when the sizes are equal the roots must be equal
// and the proof empty.
//
// A nil proof, an invalid anchor id or OldSize > NewSize is INPUT_001; a
// proof that does not verify is INT_001 (cause: the merkle/proof error),
// located at (Anchor, NewSize).
func VerifyConsistencyProof(p *ConsistencyProof) error {
	if p == nil {
		return errs.New(errs.CodeInvalidInput, "no consistency proof")
	}
	if err := segment.ValidateAnchorID(p.Anchor); err != nil {
		return fmt.Errorf("consistency proof: %w", err)
	}
	if p.OldSize > p.NewSize {
		return errs.New(errs.CodeInvalidInput, "consistency proof from size %d down to %d", p.OldSize, p.NewSize).At(p.Anchor, 0, "", 0)
	}
	if p.OldSize == 0 && p.OldRoot != emptyRoot() {
		err := merkleproof.RootMismatchError{ExpectedRoot: p.OldRoot[:], CalculatedRoot: segment.Blake3RFC6962.EmptyRoot()}
		return errs.Wrap(errs.CodeHashMismatch, MerkleError(err), "consistency proof of anchor %q: old root %s of the empty tree is not BLAKE3(\"\")", p.Anchor, p.OldRoot).At(p.Anchor, 0, "", 0)
	}
	err := merkleproof.VerifyConsistency(segment.Blake3RFC6962, p.OldSize, p.NewSize, fromHashes(p.Proof), p.OldRoot[:], p.NewRoot[:])
	if err != nil {
		return errs.Wrap(errs.CodeHashMismatch, MerkleError(err), "consistency proof of anchor %q from size %d (root %s) to %d (root %s) does not verify", p.Anchor, p.OldSize, p.OldRoot, p.NewSize, p.NewRoot).At(p.Anchor, p.NewSize, "", 0)
	}
	return nil
}

// VerifyFrontierProof checks p offline: HashLeaf(FrontierLeaf(Anchor, Size,
// AnchorRoot)) at index p.Index with the path p.Proof hashes up to p.Root in
// a frontier tree of p.Anchors leaves.
//
// A nil proof, an invalid entry (see ValidateEntry) or Index ≥ Anchors is
// INPUT_001; a proof that does not verify is INT_001 (cause: the merkle/proof
// error). Compare p.Root with the "root" of a checkpoint opened with
// OpenCheckpoint (or use Checkpoint.VerifyAnchorProof) before trusting it.
// The proof alone does not show that the anchor appears only once; a
// checkpoint body does (ParseCheckpointBody refuses duplicates).
func VerifyFrontierProof(p *FrontierProof) error {
	if p == nil {
		return errs.New(errs.CodeInvalidInput, "no frontier proof")
	}
	e := Entry{Anchor: p.Anchor, Size: p.Size, Root: p.AnchorRoot}
	leaf, err := FrontierLeaf(e)
	if err != nil {
		return fmt.Errorf("frontier proof: %w", err)
	}
	if p.Index >= p.Anchors {
		return errs.New(errs.CodeInvalidInput, "frontier proof of entry %d in a frontier of %d anchors", p.Index, p.Anchors).At(p.Anchor, p.Size, "", 0)
	}
	leafHash := segment.Blake3RFC6962.HashLeaf(leaf)
	if err := merkleproof.VerifyInclusion(segment.Blake3RFC6962, p.Index, p.Anchors, leafHash, fromHashes(p.Proof), p.Root[:]); err != nil {
		return errs.Wrap(errs.CodeHashMismatch, MerkleError(err), "frontier proof of anchor %q (size %d, root %s) as entry %d of %d does not verify against frontier root %s",
			p.Anchor, p.Size, p.AnchorRoot, p.Index, p.Anchors, p.Root).At(p.Anchor, p.Size, "", 0)
	}
	return nil
}

// MerkleError returns err, an error of merkle/proof, printed on one line with
// hashes as anchordb prints them: merkle/proof's RootMismatchError prints
// both roots as decimal byte lists over four lines. errors.As still finds
// the original (nil stays nil).
func MerkleError(err error) error {
	if err == nil {
		return nil
	}
	return merkleError{err}
}

type merkleError struct{ err error }

func (e merkleError) Error() string {
	var rm merkleproof.RootMismatchError
	if errors.As(e.err, &rm) {
		return fmt.Sprintf("calculated root %s does not match expected root %s", rootText(rm.CalculatedRoot), rootText(rm.ExpectedRoot))
	}
	return e.err.Error()
}

func (e merkleError) Unwrap() error { return e.err }

// rootText prints a root as segment.Hash does, or in hex if it is not one.
func rootText(b []byte) string {
	if len(b) == segment.HashSize {
		return segment.Hash(b).String()
	}
	return fmt.Sprintf("%x", b)
}
