package main

import (
	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/spf13/pflag"
)

var compactCmd = &command{
	name:    "compact",
	args:    "--policy F [--dry-run|--apply]",
	summary: "plan (by default) or apply retention and compaction under a policy: snapshots, deletions, truncation",
	detail: `Reads the retention policy in F ('-' for stdin; docs/CONTRACT.md §6, missing fields take their defaults):
  {"version":"v1","snapshot":{"every_records":1000,"every_seconds":86400,"every_bytes":104857600},
   "keep_snapshots":3,"raw_log":"forever","verify_before_delete":true}
An unknown field, a wrong type or a value out of range is INPUT_001 (exit 2).

--dry-run (the default) plans and changes nothing: it prints the actions in order —
create_snapshot when a trigger fired, delete_snapshot beyond keep_snapshots, and with
raw_log "truncate" record_cut and remove_segment for sealed segments wholly below the
oldest kept snapshot and covered by the newest checkpoint the database stored itself,
as its audit log records (docs/CONTRACT.md §6: the cut lies in a signed tree; sign one with
checkpoint create) — with the snapshots kept and notes on what is left alone, among them
any other file in checkpoints/. A plan that does nothing of a kind says what holds it
back: no trigger fired, the snapshots are within keep_snapshots, and for truncation no
segment sealed yet (an anchor's segment is sealed when it reaches the segment size, 64 MiB
unless the commands that append were given --segment-size), no snapshot yet to cut below,
none wholly below the oldest kept one, or no checkpoint covering them. With
--json the plan: {"policy_ref","now","actions":[{"action",…,"reason"}],"keep","notes"}.

--apply carries the plan out: nothing is deleted before what replaces it is durable and
(with verify_before_delete) verified — a new snapshot that cannot be proved by replay is
removed again and the run stops with STATE_003 (exit 1), or INT_003 when its replay gives
another state — and every action is appended to the audit log in
the database directory first. Prints the plan and what was done; with --json
{"applied":true,"plan":{…},"created":{snapshot}|null,"removed_bytes":N,"stub_bytes":S,"net_bytes":N-S}:
the segments removed, the stubs written in their place, and what that freed.
Progress is drawn on stderr when it is a terminal.`,
	minArgs: 0, maxArgs: 0,
	setup: func(fs *pflag.FlagSet) runFunc {
		var policyFile string
		var dryRun, apply bool
		fs.StringVar(&policyFile, "policy", "", "the retention policy file (JSON; '-' for stdin); required")
		fs.BoolVar(&dryRun, "dry-run", false, "plan only and change nothing (the default)")
		fs.BoolVar(&apply, "apply", false, "carry the plan out")
		return func(e *env, _ []string) error {
			if policyFile == "" {
				return usagef("compact", "compact needs --policy F")
			}
			if dryRun && apply {
				return usagef("compact", "--dry-run and --apply exclude each other")
			}
			policy, err := readPolicy(e, policyFile)
			if err != nil {
				return err
			}
			open := e.open
			if !apply {
				open = e.openRead // a plan changes nothing
			}
			db, err := open()
			if err != nil {
				return err
			}
			opts := engine.CompactOptions{Apply: apply}
			bar := e.newProgress()
			if bar.on {
				opts.Progress = func(i, n int, a snapshot.Action) {
					bar.Update("compact: %d/%d %s %s", i+1, n, a.Kind, a.Anchor)
				}
			}
			res, err := db.Compact(e.ctx, policy, opts)
			bar.Done()
			if err != nil {
				return err
			}
			e.print.Compaction(res)
			return nil
		}
	},
}

// readPolicy reads and parses a retention policy file; any fault is INPUT_001.
func readPolicy(e *env, path string) (snapshot.Policy, error) {
	data, err := readInput(e, path, "policy")
	if err != nil {
		return snapshot.Policy{}, err
	}
	return snapshot.ParsePolicy(data)
}
