package proof

import (
	"context"
	"fmt"

	"github.com/anchordb/anchordb/internal/errs"
)

// ConsistencyProver returns the consistency proof of anchor's tree between
// oldSize and newSize (0 < oldSize < newSize), in merkle/proof order. The
// engine implements it with Consistency over the anchor's NodeStore; a
// verifier without the database can serve proofs it received.
type ConsistencyProver func(ctx context.Context, anchor string, oldSize, newSize uint64) ([][]byte, error)

// CheckConsistent checks that checkpoint newer extends checkpoint older of
// the same database: every anchor of older is in newer, none shrank, an
// anchor of equal size kept its root, and, when prove is not nil, every
// anchor that grew has a consistency proof from its old (size, root) to its
// new one. Anchors that are new in newer need nothing. With prove nil only
// the sizes and equal-size roots are checked.
//
// Both checkpoints should come from OpenCheckpoint. Errors, for the first
// anchor that fails (in anchor order): nil or invalid checkpoints, or
// different origins, INPUT_001; a missing or shrunk anchor, or an equal-size
// fork, STATE_002 (conflict_detected); a proof that does not verify INT_001;
// an error of prove is returned wrapped with the anchor. Times are not
// compared.
func CheckConsistent(ctx context.Context, older, newer *Checkpoint, prove ConsistencyProver) error {
	if older == nil || newer == nil {
		return errs.New(errs.CodeInvalidInput, "consistency of checkpoints: a checkpoint is missing")
	}
	if err := older.Validate(); err != nil {
		return fmt.Errorf("older checkpoint: %w", err)
	}
	if err := newer.Validate(); err != nil {
		return fmt.Errorf("newer checkpoint: %w", err)
	}
	if older.Origin != newer.Origin {
		return errs.New(errs.CodeInvalidInput, "checkpoints of different databases: %q and %q", older.Origin, newer.Origin)
	}
	j := 0
	for _, o := range older.Entries {
		// Both entry lists are sorted by anchor id, so one pass finds them.
		for j < len(newer.Entries) && newer.Entries[j].Anchor < o.Anchor {
			j++
		}
		if j == len(newer.Entries) || newer.Entries[j].Anchor != o.Anchor {
			return errs.New(errs.CodeConflict, "anchor %q (size %d in the older checkpoint) is missing from the newer one", o.Anchor, o.Size).At(o.Anchor, o.Size, "", 0)
		}
		n := newer.Entries[j]
		switch {
		case n.Size < o.Size:
			return errs.New(errs.CodeConflict, "anchor %q shrank from size %d to %d", o.Anchor, o.Size, n.Size).At(o.Anchor, n.Size, "", 0)
		case n.Size == o.Size:
			if n.Root != o.Root {
				return errs.New(errs.CodeConflict, "anchor %q forked: size %d has root %s in the older checkpoint and %s in the newer", o.Anchor, o.Size, o.Root, n.Root).At(o.Anchor, o.Size, "", 0)
			}
			continue
		case prove == nil || o.Size == 0:
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		path, err := prove(ctx, o.Anchor, o.Size, n.Size)
		if err != nil {
			return fmt.Errorf("consistency proof of anchor %q from %d to %d: %w", o.Anchor, o.Size, n.Size, err)
		}
		hs, err := checkedHashes(path)
		if err != nil {
			return fmt.Errorf("consistency proof of anchor %q from %d to %d: %w", o.Anchor, o.Size, n.Size, err)
		}
		p := &ConsistencyProof{Anchor: o.Anchor, OldSize: o.Size, NewSize: n.Size, OldRoot: o.Root, NewRoot: n.Root, Proof: hs}
		if err := VerifyConsistencyProof(p); err != nil {
			return err
		}
	}
	return nil
}
