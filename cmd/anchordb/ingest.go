package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/humanize"
	"github.com/anchordb/anchordb/segment"
	"github.com/spf13/pflag"
)

var ingestCmd = &command{
	name:    "ingest",
	args:    "--from DIR [--anchor A]…",
	summary: "verify and join anchors from another anchordb directory (the partition case)",
	detail: `Reads the anchor logs of the anchordb database in DIR (every anchor, or those named by
--anchor), verifies every record, and joins them to this database exactly as they were
written (seq, counter, time, prev_hash, hash), so receipts and proofs from the other side
stay valid. An anchor we do not hold is copied; one we hold is extended when our log is a
prefix of the arriving one, and left alone when it is ahead. DIR must not be open for
writing (its lock is taken while it is read).

Two logs that disagree at some seq are a fork: the whole ingest is refused, nothing is
joined, STATE_002 (exit 1); with --json the error carries both heads:
  {"error":{"code":"STATE_002","reason":"conflict_detected","message","anchor","seq",
   "ours":{"seq","hash"},"theirs":{"seq","hash"}}}
An arriving record that does not verify is INT_* (exit 1). Anchors are joined one after
another in batches: an ingest that stops there (an error, an interrupt) keeps what it
joined, and its error says how many records that was ("appended":N with --json). An
ingest that fails before it joins anything into a --dir that held no database leaves none
there.

Prints {"from","anchors":[{"anchor","status","had","arrived","appended","head"}],"appended"}
where status is "new", "extended" or "up_to_date"; without --json one line an anchor.`,
	minArgs: 0, maxArgs: 0,
	setup: func(fs *pflag.FlagSet) runFunc {
		var from string
		var anchors []string
		var segSize int64
		fs.StringVar(&from, "from", "", "the other anchordb database directory (required)")
		fs.StringArrayVar(&anchors, "anchor", nil, "ingest only this anchor (repeatable; default: every anchor)")
		segmentSizeFlag(fs, &segSize)
		return func(e *env, _ []string) error {
			if from == "" {
				return usagef("ingest", "ingest needs --from DIR")
			}
			for _, a := range anchors {
				if err := segment.ValidateAnchorID(a); err != nil {
					return err
				}
			}
			if st, err := os.Stat(from); err != nil || !st.IsDir() {
				return errs.New(errs.CodeInvalidInput, "ingest: %s is not a directory", from)
			}
			// Before --dir is opened, which would create it: a mistyped
			// --from must leave no empty database behind.
			if _, err := os.Stat(filepath.Join(from, engine.IDFile)); err != nil {
				return errs.New(errs.CodeInvalidInput, "ingest: %s is not an anchordb database (it has no %s file)", from, engine.IDFile)
			}
			if samePath(from, e.g.dir) {
				return usagef("ingest", "--from names the database itself")
			}
			db, err := e.openOrCreate(segSize)
			if err != nil {
				return err
			}
			bar := e.newProgress()
			opts := engine.IngestOptions{Anchors: anchors}
			if bar.on {
				opts.Progress = func(done, total uint64) { bar.Update("ingest: %d/%s", done, humanize.Plural(total, "record")) }
			}
			rep, err := db.Ingest(e.ctx, from, opts)
			bar.Done()
			if err != nil {
				return &ingestError{appended: rep.Appended, err: err}
			}
			e.print.Ingest(rep)
			return nil
		}
	},
}

// samePath reports whether two paths name the same directory.
func samePath(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	if errA == nil && errB == nil {
		return os.SameFile(sa, sb)
	}
	absA, errA := filepath.Abs(a)
	absB, errB := filepath.Abs(b)
	return errA == nil && errB == nil && absA == absB
}

// ingestError stops an ingest; appended counts the records joined before
// it, which stay.
type ingestError struct {
	appended uint64
	err      error
}

func (e *ingestError) Error() string {
	return fmt.Sprintf("%s (before it: %s appended)", messageOf(e.err), humanize.Plural(int(e.appended), "record"))
}

func (e *ingestError) Unwrap() error { return e.err }
