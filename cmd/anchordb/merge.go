package main

import (
	"context"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/humanize"
	"github.com/anchordb/anchordb/merge"
	"github.com/spf13/pflag"
)

var mergeCmd = &command{
	name:    "merge",
	summary: "print the merged stream of every anchor by (counter, anchor id bytes), with global positions",
	detail: `Prints every record of every anchor in the merged order — by counter, ties broken by
the anchor id as raw bytes — numbered from 1. With --json each line is the record shape
{"anchor","seq","counter","time","type","key","value","idempotency_key","prev_hash","hash"}
plus "pos"; else "pos=N ANCHOR #SEQ counter=N TIME TYPE KEY=VALUE blake3:…".

--frontier F reads a frontier {"anchor id": seq, …} from the file F ('-' for stdin) and
prints the merged view of just those prefixes; an anchor or seq the database does not
hold is STATE_003 (exit 1).

Positions count every record, those a truncating compaction removed included, so they
do not change when one runs. The copies it kept (each key's last record in a removed
segment) are printed like any other; a run of positions whose records are gone is
refused with STATE_003 (exit 1, after the records around it are printed), naming the
positions and the first record. A --from past them prints no refusal.

--root prints instead {"root":"blake3:…","records":N,"frontier":{…}}: the RFC 6962 root
over the record hashes in merged order, the number of records, and the frontier it was
taken at (by default the current one; feed that field, not the whole object, back with
--frontier: jq .frontier). It covers every record, removed ones included (their hashes
stay in the stubs): two databases with the same records have the same root whatever
either compacted, a compaction does not change it, it is known at any frontier, and with
one anchor it is that anchor's tree root.`,
	minArgs: 0, maxArgs: 0,
	setup: func(fs *pflag.FlagSet) runFunc {
		var from uint64
		var limit int
		var frontierFile string
		var root bool
		fs.Uint64Var(&from, "from", 1, "first position to print (1-based)")
		fs.IntVar(&limit, "limit", 0, "print at most this many records (0: no limit)")
		fs.StringVar(&frontierFile, "frontier", "", "merge only up to this frontier: a JSON file {\"anchor\":seq,…} ('-' for stdin)")
		fs.BoolVar(&root, "root", false, `print {"root","records","frontier"} instead of the stream`)
		return func(e *env, _ []string) error {
			if limit < 0 {
				return usagef("merge", "--limit must not be negative")
			}
			if err := emptyFlag("merge", fs, "frontier"); err != nil {
				return err
			}
			if root && (fs.Changed("from") || fs.Changed("limit")) {
				return usagef("merge", "--root covers the whole merged view: it takes no --from or --limit")
			}
			var f merge.Frontier
			if frontierFile != "" {
				var err error
				if f, err = readFrontier(e, frontierFile); err != nil {
					return err
				}
			}
			db, err := e.openRead()
			if err != nil {
				return err
			}
			if root {
				return mergedRoot(e, db, f)
			}
			n := 0
			var gone goneRuns
			for p, err := range db.Merged(e.ctx, engine.MergedOptions{From: from, Frontier: f}) {
				if err != nil {
					gone.add(err) // a run of removed records; any other error ends the loop
					continue
				}
				if limit > 0 && n == limit {
					break
				}
				n++
				e.print.Merged(p)
				if e.out.err != nil {
					return e.out.err
				}
			}
			return gone.err()
		}
	},
}

func mergedRoot(e *env, db *engine.DB, f merge.Frontier) error {
	if f == nil {
		// Take the frontier first and pass it on, so that the root and the
		// frontier printed beside it agree.
		var err error
		if f, err = db.Frontier(e.ctx); err != nil {
			return err
		}
	}
	root, n, err := db.MergedRoot(e.ctx, f)
	if err != nil {
		return err
	}
	e.print.MergedRoot(root, n, f)
	return nil
}

// readFrontier reads a frontier in its JSON form {"anchor id": seq, …} from a
// file, or stdin for "-". A malformed one is INPUT_001.
func readFrontier(e *env, path string) (merge.Frontier, error) {
	data, err := readInput(e, path, "frontier")
	if err != nil {
		return nil, err
	}
	var f merge.Frontier
	// NB: not json.Unmarshal, whose own syntax check would report a
	// malformed file without a code.
	if err := f.UnmarshalJSON(data); err != nil {
		return nil, err
	}
	return f, nil
}

// checkFrontierKnown refuses a frontier that names an anchor the database
// does not hold, or a seq beyond an anchor's head (STATE_003), as Merged
// does: a state "at" records that do not exist would be a guess.
func checkFrontierKnown(ctx context.Context, db *engine.DB, f merge.Frontier) error {
	for _, id := range f.Anchors() {
		info, ok, err := db.AnchorInfo(ctx, id)
		if err != nil {
			return err
		}
		if !ok || info.Records < f[id] {
			e := errs.New(errs.CodeDependencyMissing, "frontier names seq %d of anchor %q, which has %s", f[id], id, humanize.Plural(info.Records, "record"))
			e.Anchor, e.Seq = id, f[id]
			return e
		}
	}
	return nil
}
