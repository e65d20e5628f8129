package main

import (
	"io"
	"os"
	"strings"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/humanize"
	"github.com/anchordb/anchordb/proof"
	"github.com/spf13/pflag"
)

var verifyCmd = &command{
	name:    "verify",
	summary: "check hashes, links, seqs, counters, seals, the index, trees and checkpoints against the segments",
	detail: `Reads every segment file and checks: every record hash; every prev_hash link, dense seqs
and increasing counters; every segment but the newest sealed, with a seal that matches;
segment headers that continue the chain; the index against the segments (every 's', 'k'
and 'i' row a record implies, and no others); the Merkle tree recomputed from the chain
against the stored nodes and the in-memory tree; the stored checkpoints against the trees
(their signatures too when --pub is given); every snapshot, proved by replay as snapshot
verify proves it, and present when the audit log records it; the audit log's chain against
the head the index recorded. Damaged anchors are checked like the others. Every outbox
(an anchor "outbox/NAME") is replayed and its state and index rows checked against its
log (docs/OUTBOX.md); what that finds is reported like the rest.

--from-checkpoint F --pub P checks only what came after the signed checkpoint F: for each
anchor it lists, the records after its size, and that the anchor's tree at that size has
the checkpoint's root.

With --json prints {"ok","anchors","records","bytes","failures":[{"code","reason","anchor",
"seq","file","offset","message"}]}; else a summary and one line per finding. Exits 1 when
anything fails. Progress is drawn on stderr when it is a terminal.

While another process has the database open for writing (or a read-only open finds its
index not current: a crash, a copy taken while it was open), verify reads the files alone
and holds no lock: every anchor's segments, stubs and journal as far as they hold whole,
chained records, and the stored checkpoints against them. The output then says so, with
what it did not check (the index, snapshots, audit log) under "files":{"why","unchecked",
"tails"}; bytes at the end of an anchor's newest segment that do not read as a record are
a write in progress there, listed under "tails", never a finding.`,
	minArgs: 0, maxArgs: 0,
	setup: func(fs *pflag.FlagSet) runFunc {
		var anchors []string
		var threads int
		var stopAtFirst bool
		var from, pub string
		fs.StringArrayVar(&anchors, "anchor", nil, "check only this anchor (repeatable)")
		fs.IntVar(&threads, "threads", 0, "anchors checked at once (default: the number of CPUs)")
		fs.BoolVar(&stopAtFirst, "stop-at-first", false, "stop at the first finding")
		fs.StringVar(&from, "from-checkpoint", "", "check only what came after this signed checkpoint file (needs --pub)")
		fs.StringVar(&pub, "pub", "", "verifier key file: the --from-checkpoint and the stored checkpoints must be signed with it")
		return func(e *env, _ []string) error {
			if threads < 0 {
				return usagef("verify", "--threads must not be negative")
			}
			if err := emptyFlag("verify", fs, "pub", "from-checkpoint"); err != nil {
				return err
			}
			if from != "" && pub == "" {
				return usagef("verify", "--from-checkpoint needs --pub, the key it is signed with")
			}
			opts := engine.VerifyOptions{Anchors: anchors, Threads: threads, StopAtFirst: stopAtFirst}
			if pub != "" {
				key, err := readKeyFile(e, pub)
				if err != nil {
					return err
				}
				opts.VerifierKeys = []string{key}
			}
			if from != "" {
				msg, err := readInput(e, from, "checkpoint")
				if err != nil {
					return err
				}
				if opts.From, err = proof.OpenCheckpoint(msg, opts.VerifierKeys...); err != nil {
					return err
				}
			}
			db, err := e.openRead()
			if err != nil {
				return err
			}
			bar := e.newProgress()
			if bar.on {
				opts.Progress = func(p engine.VerifyProgress) {
					pct := 100.0
					if p.TotalBytes > 0 {
						pct = 100 * float64(p.Bytes) / float64(p.TotalBytes)
					}
					bar.Update("verify: %5.1f%%  %d/%s  %s  %s of %s", pct, p.AnchorsDone, humanize.Plural(p.Anchors, "anchor"), humanize.Plural(p.Records, "record"),
						humanize.Bytes(p.Bytes), humanize.Bytes(p.TotalBytes))
				}
			}
			rep, err := db.Verify(e.ctx, opts)
			bar.Done()
			if err != nil {
				return err
			}
			if rep.Files != nil {
				// Read from the files alone: an outbox's check needs the
				// index's rows of it.
				rep.Files.Unchecked = append(rep.Files.Unchecked, "outboxes")
			} else if !stopAtFirst || rep.OK {
				if err := verifyOutboxes(e, db, &rep, anchors); err != nil {
					return err
				}
			}
			e.print.Verify(rep)
			if !rep.OK {
				return exitStatus(exitFinding)
			}
			return nil
		}
	},
}

// readKeyFile reads a note key (signer or verifier) from a file; surrounding
// white space is dropped.
//
// NB: not os.ReadFile. The file is read as readInput reads one, so that a
// FIFO whose writer never comes still ends on an interrupt (main catches
// SIGINT and SIGTERM, so a read that ignores ctx leaves only SIGKILL), and a
// file that never ends (/dev/zero) is refused instead of filling memory.
func readKeyFile(e *env, path string) (string, error) {
	f, in, _, err := openInput(e.ctx, path)
	var b []byte
	if err == nil {
		b, err = io.ReadAll(io.LimitReader(in, maxKeyFile+1))
		_ = f.Close()
	}
	if err != nil && e.ctx.Err() != nil {
		return "", err // interrupted
	}
	if err != nil {
		return "", errs.Wrap(errs.CodeInvalidInput, err, "read key file")
	}
	if len(b) > maxKeyFile {
		return "", errs.New(errs.CodeInvalidInput, "key file %s is over %d bytes: not a note key", path, maxKeyFile)
	}
	key := strings.TrimSpace(string(b))
	if key == "" {
		return "", errs.New(errs.CodeInvalidInput, "key file %s is empty", path)
	}
	return key, nil
}

// maxKeyFile bounds a key file; a note key is about a hundred bytes.
const maxKeyFile = 64 << 10

// maxInput bounds the files the proof and checkpoint commands read.
const maxInput = 64 << 20

// readInput reads a file, or stdin for "-", of at most maxInput bytes.
func readInput(e *env, path, what string) ([]byte, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = readAllLimited(e.stdin)
	} else {
		var f *os.File
		var in io.Reader
		if f, in, _, err = openInput(e.ctx, path); err == nil {
			b, err = readAllLimited(in)
			_ = f.Close()
		}
	}
	if err != nil && e.ctx.Err() != nil {
		return nil, err // interrupted
	}
	if err != nil {
		return nil, errs.Wrap(errs.CodeInvalidInput, err, "read %s file", what)
	}
	return b, nil
}
