package main

import (
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/spf13/pflag"
)

var rebuildIndexCmd = &command{
	name:    "rebuild-index",
	args:    "[--apply] [--from-snapshot]",
	summary: "drop the index and rebuild it from the segments (a dry run unless --apply)",
	detail: `The index is a projection of the anchor logs. Without --apply this counts what a rebuild
would read — anchors, segment files and their bytes, and the stubs compaction left for
truncated segments — and changes nothing. With --apply it takes the database's lock,
removes the index and rebuilds it from every segment (below a compaction's cut, from the
stubs it left), then prints the recovery report. The database must not be open elsewhere
(STATE_001).

--from-snapshot starts from the newest snapshot that verifies and that the audit log
records as created (same name, file hash and state hash; any other is skipped,
snapshot_skipped with STATE_003): the state at its frontier comes from the snapshot and the records up to it are indexed without recomputing their
hashes (links and seals are still checked; run verify for the rest). Much faster on a
long log; history before the snapshot is not rebuilt. Anything unusual on disk falls back
to a full replay, and the report says so (fast_rebuild_abandoned).

With --json prints {"dir","anchors","segments","stubs","bytes","applied","from_snapshot",
"seconds"} and with --apply "recovery":{"clean","rebuilt","events":[{"kind",…}]}: what the
rebuild found and did (adopted records, state_from_snapshot, snapshot_skipped, …).`,
	minArgs: 0, maxArgs: 0,
	setup: func(fs *pflag.FlagSet) runFunc {
		var apply, fromSnapshot bool
		fs.BoolVar(&apply, "apply", false, "drop and rebuild the index (default: only count what a rebuild would read)")
		fs.BoolVar(&fromSnapshot, "from-snapshot", false, "start from the newest snapshot the audit log records that verifies")
		return func(e *env, _ []string) error {
			if err := isDatabase(e.g.dir); err != nil {
				return err
			}
			// NB: the rebuild takes the database's lock and opens it itself;
			// this command must not hold it open.
			// The recovery report is printed below: the logger keeps to errors.
			opts := engine.Options{Logger: stderrLogger{w: e.stderr, quiet: true}, Clock: engineClock, ReadOnly: e.g.readOnly}
			bar := e.newProgress()
			if apply {
				bar.Update("rebuild-index: rebuilding the index of %s", e.g.dir)
			}
			start := time.Now()
			plan, err := engine.RebuildIndexWith(e.ctx, e.g.dir, opts, engine.RebuildOptions{Apply: apply, FromSnapshot: fromSnapshot})
			elapsed := time.Since(start)
			bar.Done()
			if err != nil {
				return err
			}
			out := rebuildReport{plan: plan, fromSnapshot: fromSnapshot}
			if plan.Applied {
				out.seconds = elapsed.Seconds()
			}
			e.print.Rebuild(out)
			return nil
		}
	},
}
