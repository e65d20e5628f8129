package main

import (
	"github.com/anchordb/anchordb/tool/demo"
	"github.com/spf13/pflag"
)

var demoCmd = &command{
	name:    "demo",
	summary: "run the main job on a fresh database: concurrent writers, verify, merge, checkpoint, snapshot, compact, rebuild; print a report",
	detail: `Creates a fresh database (in a temporary directory unless --dir is given; an explicit
--dir must be empty or absent) with small segments (--segment-size, default sized so
that every anchor seals several), starts --writers goroutines that each append --records
records (puts, deletes, events, some with idempotency keys that are retried) to anchors
chosen at random among --anchors, all with sync durability, then checks, in order:

  chains, receipts, merged reads
                seqs dense, prev_hash links from the genesis hash, hashes recompute,
                counters increase; every acknowledged receipt is in its log; counters
                unique, Get and Scan agree with the last write in merged order
  close, reopen the database closes cleanly and reopens without recovery; the same
                checks again after the reopen
  verify        the engine's full verify finds nothing
  merge         the merged stream at the current frontier holds every record once,
                positions 1…N, strictly ordered by (counter, anchor id bytes), and its
                records hash to the merged root
  checkpoint    a checkpoint signed with a fresh key (kept in the database directory as
                demo-checkpoint.key/.pub) opens with the verifier key, covers every
                record, and does not open with another key
  inclusion proof
                a record's inclusion proof at the checkpoint's size verifies offline,
                against the checkpoint's root, and fails with a changed leaf
  snapshot      a snapshot of the state verifies by replay, and its state hash is the
                hash of the state the acknowledged writes imply
  compact       a truncating policy (keep 1 snapshot, raw_log truncate) is applied,
                a second round of writes, then two more compactions: sealed segments
                below the kept snapshot are removed; the state, verify, the audit log
                and the kept snapshots are checked afterwards
  rebuild       the database is closed and its index rebuilt from the snapshot
                (rebuild-index --apply --from-snapshot); heads, merged root and state
                are as before; then reopen, verify and idempotent retries again

Prints a short report (with --json one object: {"ok",…,"records_per_sec",…,
"merged_records","removed_bytes","rebuild_seconds",…,"checks":[{"name","ok","detail"}]}).
Exit 1 if a check fails.`,
	minArgs: 0, maxArgs: 0,
	setup: func(fs *pflag.FlagSet) runFunc {
		var cfg demo.Config
		fs.IntVar(&cfg.Writers, "writers", 8, "concurrent writers")
		fs.IntVar(&cfg.Anchors, "anchors", 64, "anchors the writers append to")
		fs.IntVar(&cfg.Records, "records", 500, "records each writer appends")
		fs.BoolVar(&cfg.Keep, "keep", false, "keep the temporary database directory")
		fs.Int64Var(&cfg.SegmentSize, "segment-size", 0, "segment size in bytes (at least 1024; default: sized so every anchor seals several segments)")
		return func(e *env, _ []string) error {
			if e.g.readOnly {
				return usagef("demo", "demo writes a database of its own: --read-only does not apply")
			}
			return runDemo(e, cfg)
		}
	},
}

func runDemo(e *env, cfg demo.Config) error {
	switch {
	case cfg.Writers < 1 || cfg.Writers > demo.MaxWriters:
		return usagef("demo", "--writers must be 1..10000")
	case cfg.Anchors < 1 || cfg.Anchors > demo.MaxAnchors:
		return usagef("demo", "--anchors must be 1..1000000")
	case cfg.Records < 1 || cfg.Records > demo.MaxRecords:
		return usagef("demo", "--records must be 1..10000000")
	case int64(cfg.Writers)*int64(cfg.Records) > demo.MaxWrites:
		return usagef("demo", "--writers × --records must be at most 50,000,000")
	case cfg.SegmentSize != 0 && (cfg.SegmentSize < demo.MinSegmentSize || cfg.SegmentSize > demo.MaxSegmentSize):
		return usagef("demo", "--segment-size must be 1024..%d", demo.MaxSegmentSize)
	}
	if e.g.dirSet {
		cfg.Dir = e.g.dir
	}
	cfg.Logger = stderrLogger{w: e.stderr, quiet: e.g.quiet}
	if p := e.newProgress(); p.on {
		cfg.Progress = p
	}
	r, err := demo.Run(e.ctx, cfg)
	if err != nil {
		return err
	}
	e.print.Demo(r)
	if !r.OK {
		return exitStatus(exitFinding)
	}
	return nil
}
