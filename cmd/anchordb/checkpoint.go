package main

import (
	"github.com/anchordb/anchordb/proof"
	"github.com/spf13/pflag"
)

var checkpointCmd = &command{
	name:    "checkpoint",
	args:    "create --key F | verify F --pub P",
	summary: "sign a checkpoint of every anchor's size and root, or check a signed one",
	detail: `checkpoint create --key F signs a checkpoint (a C2SP signed note: origin
anchordb/<db id>/blake3, the number of anchors and records, the frontier root, the time,
one line per anchor with its size and Merkle root) with the signer key in F (from
keygen), keeps it in the database's checkpoints/ directory, records it in the audit log
and prints it. A checkpoint that contradicts the latest stored one (an anchor missing,
shrunk or forked) is refused with STATE_002. Only a checkpoint so recorded bounds a
compaction's cut: a note copied into checkpoints/ by other means bounds nothing.

checkpoint verify F --pub P checks the signed note in F ('-' for stdin) against the
verifier key in P; it needs no database. A signature that does not verify is AUTH_003
(exit 1); a malformed file INPUT_001 (exit 2).

With --json, create prints {"note","file","origin","anchors","records","root","time"} and
verify {"ok","origin","anchors","records","root","time","entries":[{"anchor","size","root"}]}.`,
	minArgs: 1, maxArgs: 2,
	setup: func(fs *pflag.FlagSet) runFunc {
		var key, pub string
		fs.StringVar(&key, "key", "", "create: the signer key file (PREFIX.key from keygen)")
		fs.StringVar(&pub, "pub", "", "verify: the verifier key file (PREFIX.pub from keygen)")
		return func(e *env, args []string) error {
			switch args[0] {
			case "create":
				if len(args) != 1 || key == "" || pub != "" {
					return usagef("checkpoint", "usage: checkpoint create --key F")
				}
				return checkpointCreate(e, key)
			case "verify":
				if len(args) != 2 || pub == "" || key != "" {
					return usagef("checkpoint", "usage: checkpoint verify F --pub P")
				}
				return checkpointVerify(e, args[1], pub)
			}
			return usagef("checkpoint", "unknown checkpoint command %q (want create or verify)", args[0])
		}
	},
}

func checkpointCreate(e *env, keyFile string) error {
	key, err := readKeyFile(e, keyFile)
	if err != nil {
		return err
	}
	db, err := e.open()
	if err != nil {
		return err
	}
	msg, cp, err := db.CreateCheckpoint(e.ctx, key)
	if err != nil {
		return err
	}
	var file string
	if latest, err := db.LatestCheckpoint(e.ctx); err == nil && latest != nil {
		file = latest.Path
	}
	e.print.CheckpointCreated(msg, cp, file)
	return nil
}

// openSignedCheckpoint reads the note in noteFile ('-': stdin) and opens it
// with the verifier key in pubFile: AUTH_003 unless the signature verifies.
func openSignedCheckpoint(e *env, noteFile, pubFile string) (*proof.Checkpoint, error) {
	pub, err := readKeyFile(e, pubFile)
	if err != nil {
		return nil, err
	}
	msg, err := readInput(e, noteFile, "checkpoint")
	if err != nil {
		return nil, err
	}
	return proof.OpenCheckpoint(msg, pub)
}

func checkpointVerify(e *env, noteFile, pubFile string) error {
	cp, err := openSignedCheckpoint(e, noteFile, pubFile)
	if err != nil {
		return err
	}
	e.print.CheckpointVerified(cp)
	return nil
}
