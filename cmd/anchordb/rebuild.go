package main

import (
	"fmt"
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
			opts := engine.Options{Logger: stderrLogger{w: e.stderr, quiet: true}, ReadOnly: e.g.readOnly}
			bar := e.newProgress()
			if apply {
				bar.update("rebuild-index: rebuilding the index of %s", e.g.dir)
			}
			start := time.Now()
			plan, err := engine.RebuildIndexWith(e.ctx, e.g.dir, opts, engine.RebuildOptions{Apply: apply, FromSnapshot: fromSnapshot})
			elapsed := time.Since(start)
			bar.done()
			if err != nil {
				return err
			}
			out := rebuildJSON{Dir: plan.Dir, Anchors: plan.Anchors, Segments: plan.Segments, Stubs: plan.Stubs, Bytes: plan.Bytes,
				Applied: plan.Applied, FromSnapshot: fromSnapshot}
			if plan.Applied {
				rec := newRecoveryJSON(plan.Report)
				out.Seconds, out.Recovery = elapsed.Seconds(), &rec
			}
			if e.g.json {
				e.out.json(out)
				return nil
			}
			printRebuildHuman(e, out)
			return nil
		}
	},
}

type rebuildJSON struct {
	Dir          string        `json:"dir"`
	Anchors      int           `json:"anchors"`
	Segments     int           `json:"segments"`
	Stubs        int           `json:"stubs"`
	Bytes        int64         `json:"bytes"`
	Applied      bool          `json:"applied"`
	FromSnapshot bool          `json:"from_snapshot"`
	Seconds      float64       `json:"seconds"`
	Recovery     *recoveryJSON `json:"recovery,omitempty"` // set with --apply
}

func printRebuildHuman(e *env, r rebuildJSON) {
	what := fromText(r.FromSnapshot)
	if !r.Applied {
		e.out.linef("rebuild-index (dry run): would drop the index of %s and rebuild it %sfrom %s, %s (%s) and %s of truncated segments",
			r.Dir, what, plural(r.Anchors, "anchor"), plural(r.Segments, "segment file"), humanBytes(r.Bytes), plural(r.Stubs, "stub"))
		if !e.g.quiet {
			e.out.linef("nothing was changed; run with --apply to rebuild")
		}
		return
	}
	e.out.linef("rebuilt the index of %s %sfrom %s, %s (%s) and %s in %.3fs",
		r.Dir, what, plural(r.Anchors, "anchor"), plural(r.Segments, "segment file"), humanBytes(r.Bytes), plural(r.Stubs, "stub"), r.Seconds)
	if e.g.quiet {
		return
	}
	for _, ev := range r.Recovery.Events { // r.Applied: Recovery is set
		line := ev.Kind
		if ev.Anchor != "" {
			line += " anchor=" + display([]byte(ev.Anchor))
		}
		if ev.File != "" {
			line += " file=" + ev.File
		}
		if ev.Records > 0 {
			line += fmt.Sprintf(" records=%d", ev.Records)
		}
		if ev.Error != nil {
			line += ": " + ev.Error.Code + " " + ev.Error.Message
		}
		e.out.linef("  %s", line)
	}
}

func fromText(fromSnapshot bool) string {
	if fromSnapshot {
		return "starting at the newest audited snapshot that verifies, "
	}
	return ""
}
