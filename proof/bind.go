package proof

import (
	"github.com/anchordb/anchordb/internal/errs"
)

// Bind checks that v, a proof VerifyJSON (or one of the Verify*Proof
// functions) accepted, proves against this checkpoint rather than only
// against the root it carries:
//
//   - an inclusion proof must be in the tree the checkpoint lists for its
//     anchor: the same size and root;
//   - a consistency proof must have the checkpoint's tree at one of its
//     ends: its new size and root (an older tree is a prefix of the
//     checkpointed one) or its old size and root (the checkpointed tree is
//     a prefix of a newer one);
//   - a frontier-inclusion proof must be against the checkpoint's frontier
//     root and number of anchors, for the entry the checkpoint lists.
//
// Anything else is INT_001 with the anchor and size the proof claims. c
// should come from OpenCheckpoint, so that what it binds to is signed; Bind
// does not verify v itself.
func (c *Checkpoint) Bind(v Verified) error {
	switch {
	case v.Inclusion != nil:
		p := v.Inclusion
		e, err := c.listed(p.Anchor, p.Size)
		if err != nil {
			return err
		}
		if p.Size != e.Size || p.Root != e.Root {
			return errs.New(errs.CodeHashMismatch, "inclusion proof is in anchor %q's tree of size %d (root %s); the checkpoint lists size %d (root %s): a proof at size %d is needed",
				p.Anchor, p.Size, p.Root, e.Size, e.Root, e.Size).At(p.Anchor, p.Seq, "", 0)
		}
		return nil
	case v.Consistency != nil:
		p := v.Consistency
		e, err := c.listed(p.Anchor, p.NewSize)
		if err != nil {
			return err
		}
		if (p.NewSize == e.Size && p.NewRoot == e.Root) || (p.OldSize == e.Size && p.OldRoot == e.Root) {
			return nil
		}
		return errs.New(errs.CodeHashMismatch, "consistency proof of anchor %q between sizes %d and %d has neither end at the checkpoint's size %d (root %s)",
			p.Anchor, p.OldSize, p.NewSize, e.Size, e.Root).At(p.Anchor, p.NewSize, "", 0)
	case v.Frontier != nil:
		p := v.Frontier
		e, err := c.listed(p.Anchor, p.Size)
		if err != nil {
			return err
		}
		if p.Root != c.Root || p.Anchors != c.Anchors {
			return errs.New(errs.CodeHashMismatch, "frontier proof is against root %s of %d anchors, the checkpoint has root %s of %d",
				p.Root, p.Anchors, c.Root, c.Anchors).At(p.Anchor, p.Size, "", 0)
		}
		if p.Size != e.Size || p.AnchorRoot != e.Root {
			// Unreachable for a verified proof under the same root (the
			// leaf commits to both), unless the checkpoint's entries
			// disagree with its own root.
			return errs.New(errs.CodeHashMismatch, "frontier proof proves anchor %q at size %d (root %s); the checkpoint lists size %d (root %s)",
				p.Anchor, p.Size, p.AnchorRoot, e.Size, e.Root).At(p.Anchor, p.Size, "", 0)
		}
		return nil
	}
	return errs.New(errs.CodeInvalidInput, "no proof to bind to the checkpoint")
}

// listed returns the checkpoint's entry for anchor, or the INT_001 finding
// that the checkpoint does not cover it (at is the size the proof claims).
func (c *Checkpoint) listed(anchor string, at uint64) (Entry, error) {
	e, ok := c.Entry(anchor)
	if !ok {
		return Entry{}, errs.New(errs.CodeHashMismatch, "the checkpoint (%s, %d anchors) does not list anchor %q", c.Origin, c.Anchors, anchor).At(anchor, at, "", 0)
	}
	return e, nil
}
