package main

import (
	"strconv"

	"github.com/anchordb/anchordb/proof"
	"github.com/spf13/pflag"
)

var proveCmd = &command{
	name:    "prove",
	args:    "inclusion ANCHOR SEQ [--size N] | consistency ANCHOR OLD NEW",
	summary: "print a Merkle proof: a record's inclusion in its anchor tree, or the tree's consistency",
	detail: `prove inclusion ANCHOR SEQ proves record SEQ is in the anchor's tree of --size records
(default: the current size):
  {"anchor","seq","size","leaf","root","proof":[…],"kind":"inclusion"}
where leaf is the record hash (the Merkle leaf data) and root the tree root at size.

prove consistency ANCHOR OLD NEW proves the tree of OLD records is a prefix of the tree of
NEW records:
  {"anchor","old_size","new_size","old_root","new_root","proof":[…],"kind":"consistency"}

The proof is always printed as JSON (it is the output); verify it offline with
verify-proof or with github.com/transparency-dev/merkle/proof and a BLAKE3 hasher (RFC
9162: leaf = BLAKE3(0x00 ‖ leaf), node = BLAKE3(0x01 ‖ left ‖ right)). An unknown anchor
or a size beyond the anchor's is STATE_003 (exit 1).`,
	minArgs: 3, maxArgs: 4,
	setup: func(fs *pflag.FlagSet) runFunc {
		var size uint64
		fs.Uint64Var(&size, "size", 0, "inclusion: the tree size to prove against (default: the current size)")
		return func(e *env, args []string) error {
			if fs.Changed("size") && size == 0 {
				return usagef("prove", "--size 0: a tree size to prove against is at least 1 (omit --size for the current size)")
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
				db, err := e.open()
				if err != nil {
					return err
				}
				p, err := db.ProveInclusion(e.ctx, args[1], seq, size)
				if err != nil {
					return err
				}
				e.out.json(p)
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
				db, err := e.open()
				if err != nil {
					return err
				}
				p, err := db.ProveConsistency(e.ctx, args[1], oldSize, newSize)
				if err != nil {
					return err
				}
				e.out.json(p)
				return nil
			}
			return usagef("prove", "unknown proof %q (want inclusion or consistency)", args[0])
		}
	},
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
	args:    "FILE",
	summary: "check a proof from prove offline, against the root it carries ('-' reads stdin)",
	detail: `Checks an inclusion, consistency or frontier-inclusion proof (the JSON prove prints; the
"kind" field may be absent) with the RFC 9162 algorithms and BLAKE3. Needs no database.
A proof only shows its root: compare the anchor, size and root with a signed checkpoint
before trusting it (as with any RFC 6962 proof, the size is not bound by the proof alone).

Exits 0 when the proof verifies, 1 when it does not (INT_001), 2 when the file is not a
proof (INPUT_001). With --json prints {"ok":true,"kind","description"}.`,
	minArgs: 1, maxArgs: 1,
	setup: func(fs *pflag.FlagSet) runFunc {
		return func(e *env, args []string) error {
			data, err := readInput(e, args[0], "proof")
			if err != nil {
				return err
			}
			v, err := proof.VerifyJSON(data)
			if err != nil {
				return err
			}
			if e.g.json {
				e.out.json(verifiedJSON{OK: true, Kind: string(v.Kind), Description: v.String()})
				return nil
			}
			if !e.g.quiet {
				e.out.linef("verified %s", v)
			}
			return nil
		}
	},
}

type verifiedJSON struct {
	OK          bool   `json:"ok"`
	Kind        string `json:"kind"`
	Description string `json:"description"`
}
