package main

import (
	"fmt"
	"strconv"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/proof"
	"github.com/spf13/pflag"
)

var proveCmd = &command{
	name:    "prove",
	args:    "inclusion ANCHOR SEQ [--size N] | consistency ANCHOR OLD NEW | frontier ANCHOR [--checkpoint F]",
	summary: "print a Merkle proof: a record in its anchor tree, the tree's consistency, or the anchor in a checkpoint",
	detail: `prove inclusion ANCHOR SEQ proves record SEQ is in the anchor's tree of --size records
(default: the current size):
  {"anchor","seq","size","leaf","root","proof":[…],"kind":"inclusion"}
where leaf is the record hash (the Merkle leaf data) and root the tree root at size.

prove consistency ANCHOR OLD NEW proves the tree of OLD records is a prefix of the tree of
NEW records:
  {"anchor","old_size","new_size","old_root","new_root","proof":[…],"kind":"consistency"}

prove frontier ANCHOR proves the anchor's entry (its size and tree root) is a leaf of a
checkpoint's frontier root: the newest checkpoint stored in the database, or the signed
note in --checkpoint F ('-' for stdin; no database is needed then, and its signature is
not checked here: verify-proof --checkpoint F --pub P checks both):
  {"anchor","size","anchor_root","index","anchors","root","proof":[…],"origin","kind":"frontier_inclusion"}
With an inclusion proof at the checkpoint's size for the anchor, it chains a record to the
signed root.

The proof is always printed as JSON (it is the output); verify it offline with
verify-proof or with github.com/transparency-dev/merkle/proof and a BLAKE3 hasher (RFC
9162: leaf = BLAKE3(0x00 ‖ leaf), node = BLAKE3(0x01 ‖ left ‖ right)). An unknown anchor,
a size beyond the anchor's, an anchor the checkpoint does not list or a database without
a checkpoint is STATE_003 (exit 1).`,
	minArgs: 2, maxArgs: 4,
	setup: func(fs *pflag.FlagSet) runFunc {
		var size uint64
		var checkpoint string
		fs.Uint64Var(&size, "size", 0, "inclusion: the tree size to prove against (default: the current size)")
		fs.StringVar(&checkpoint, "checkpoint", "", "frontier: the signed checkpoint note to prove against (default: the newest stored)")
		return func(e *env, args []string) error {
			if fs.Changed("size") && size == 0 {
				return usagef("prove", "--size 0: a tree size to prove against is at least 1 (omit --size for the current size)")
			}
			if fs.Changed("checkpoint") && (args[0] != "frontier" || checkpoint == "") {
				return usagef("prove", "--checkpoint F goes with prove frontier and names a note file")
			}
			switch args[0] {
			case "inclusion":
				if len(args) != 3 {
					return usagef("prove", "usage: prove inclusion ANCHOR SEQ [--size N]")
				}
				seq, err := parseCount("SEQ", args[2])
				if err != nil {
					return err
				}
				db, err := e.openRead()
				if err != nil {
					return err
				}
				p, err := db.ProveInclusion(e.ctx, args[1], seq, size)
				if err != nil {
					return err
				}
				e.print.Proof(p)
				return nil
			case "consistency":
				if len(args) != 4 || fs.Changed("size") {
					return usagef("prove", "usage: prove consistency ANCHOR OLD NEW")
				}
				oldSize, err := parseCount("OLD", args[2])
				if err != nil {
					return err
				}
				newSize, err := parseCount("NEW", args[3])
				if err != nil {
					return err
				}
				if newSize == 0 {
					return usagef("prove", "NEW must be at least 1")
				}
				db, err := e.openRead()
				if err != nil {
					return err
				}
				p, err := db.ProveConsistency(e.ctx, args[1], oldSize, newSize)
				if err != nil {
					return err
				}
				e.print.Proof(p)
				return nil
			case "frontier":
				if len(args) != 2 || fs.Changed("size") {
					return usagef("prove", "usage: prove frontier ANCHOR [--checkpoint F]")
				}
				cp, err := checkpointToProve(e, checkpoint)
				if err != nil {
					return err
				}
				p, err := cp.ProveAnchor(args[1])
				if err != nil {
					return err
				}
				e.print.Proof(p)
				return nil
			}
			return usagef("prove", "unknown proof %q (want inclusion, consistency or frontier)", args[0])
		}
	},
}

// checkpointToProve returns the checkpoint a frontier proof is against: the
// note in file when it is named, else the newest one the database keeps.
func checkpointToProve(e *env, file string) (*proof.Checkpoint, error) {
	if file != "" {
		msg, err := readInput(e, file, "checkpoint")
		if err != nil {
			return nil, err
		}
		return engine.ParseCheckpointNote(msg)
	}
	db, err := e.openRead()
	if err != nil {
		return nil, err
	}
	latest, err := db.LatestCheckpoint(e.ctx)
	if err != nil {
		return nil, err
	}
	if latest == nil {
		return nil, errs.New(errs.CodeDependencyMissing, "the database at %s keeps no checkpoint (run checkpoint create --key F)", e.g.dir)
	}
	if latest.Err != nil {
		return nil, fmt.Errorf("newest checkpoint %s: %w", latest.Path, latest.Err)
	}
	return latest.Checkpoint, nil
}

// parseCount parses a seq or tree size argument.
func parseCount(what, s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, usagef("prove", "%s %q is not a non-negative integer", what, s)
	}
	return n, nil
}

var verifyProofCmd = &command{
	name:    "verify-proof",
	args:    "FILE [--checkpoint F --pub P]",
	summary: "check a proof from prove offline, against the root it carries or a signed checkpoint ('-' reads stdin)",
	detail: `Checks an inclusion, consistency or frontier-inclusion proof (the JSON prove prints; the
"kind" field may be absent) with the RFC 9162 algorithms and BLAKE3. Needs no database.

On its own a proof only shows its own root (as with any RFC 6962 proof, the size is not
bound by the proof alone). With --checkpoint F --pub P the signed note in F is checked
against the verifier key in P (AUTH_003 if it does not verify), and the proof must be about
what that checkpoint signs: an inclusion proof in the anchor's tree at the checkpoint's
size and root; a consistency proof with the checkpoint's tree at one end; a frontier proof
under the checkpoint's root. Otherwise INT_001.

Exits 0 when the proof verifies, 1 when it does not (INT_001, AUTH_003), 2 when the file
is not a proof (INPUT_001). With --json prints {"ok":true,"kind","description"}, and with
--checkpoint also "checkpoint":{"origin","anchors","records","root","time"}.`,
	minArgs: 1, maxArgs: 1,
	setup: func(fs *pflag.FlagSet) runFunc {
		var checkpoint, pub string
		fs.StringVar(&checkpoint, "checkpoint", "", "a signed checkpoint note the proof must be about")
		fs.StringVar(&pub, "pub", "", "the verifier key file of --checkpoint (PREFIX.pub from keygen)")
		return func(e *env, args []string) error {
			if (checkpoint == "") != (pub == "") {
				return usagef("verify-proof", "--checkpoint F and --pub P go together")
			}
			if checkpoint == "-" && args[0] == "-" {
				return usagef("verify-proof", "the proof and the checkpoint cannot both be read from stdin")
			}
			var cp *proof.Checkpoint
			if checkpoint != "" {
				var err error
				if cp, err = openSignedCheckpoint(e, checkpoint, pub); err != nil {
					return err
				}
			}
			data, err := readInput(e, args[0], "proof")
			if err != nil {
				return err
			}
			v, err := proof.VerifyJSON(data)
			if err != nil {
				return err
			}
			out := proofCheck{kind: string(v.Kind), description: v.String()}
			if cp != nil {
				if err := cp.Bind(v); err != nil {
					return err
				}
				out.checkpoint = cp
				out.description += fmt.Sprintf(", as signed by checkpoint %s at %s", cp.Origin, checkpointTime(cp))
			}
			e.print.ProofVerified(out)
			return nil
		}
	},
}
