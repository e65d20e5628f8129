package main

import (
	"errors"
	"fmt"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/humanize"
	"github.com/anchordb/anchordb/merge"
	"github.com/anchordb/anchordb/segment"
	"github.com/spf13/pflag"
)

const streamHelp = `Prints one record a line: with --json the record shape
{"anchor","seq","counter","time","type","key","value","idempotency_key","prev_hash","hash"}
(byte strings as JSON strings when valid UTF-8, else {"b64":"…"}; key null for an event
without one, value null for a delete), else "ANCHOR #SEQ counter=N TIME TYPE KEY=VALUE blake3:…".
An empty result prints nothing and exits 0.`

var getCmd = &command{
	name:    "get",
	args:    "KEY",
	summary: "print the live value of KEY: its last put or delete in merged order",
	detail: `Prints the record of the winning version plus "found":true. A missing or deleted key
prints {"found":false,"key":"KEY"} (without --json, "not found: KEY" on stderr) and exits 1.

--at F reads a frontier {"anchor id": seq, …} from the file F ('-' for stdin; the
"frontier" field of merge --root --json is one: jq .frontier) and answers from the state
at that frontier: the last put or delete of KEY in merged order among the records it
contains. A frontier naming an anchor or seq the database does not hold, or a seq below
a compaction's cut, is STATE_003 (exit 1).`,
	minArgs: 1, maxArgs: 1,
	setup: func(fs *pflag.FlagSet) runFunc {
		var raw bool
		var at string
		fs.BoolVar(&raw, "raw", false, "print only the value's bytes, unchanged (no newline); ignores --json")
		fs.StringVar(&at, "at", "", "answer at this frontier: a JSON file {\"anchor\":seq,…} ('-' for stdin)")
		return func(e *env, args []string) error {
			if err := emptyFlag("get", fs, "at"); err != nil {
				return err
			}
			key := []byte(args[0])
			var f merge.Frontier
			if at != "" {
				var err error
				if f, err = readFrontier(e, at); err != nil {
					return err
				}
			}
			db, err := e.openRead()
			if err != nil {
				return err
			}
			var v engine.Version
			if f != nil {
				if err := checkFrontierKnown(e.ctx, db, f); err != nil {
					return err
				}
				v, err = db.GetAt(e.ctx, key, f)
			} else {
				v, err = db.Get(e.ctx, key)
			}
			if errors.Is(err, engine.ErrNotFound) {
				if raw { // --raw ignores --json
					newTextPrinter(e).NotFound(key)
				} else {
					e.print.NotFound(key)
				}
				return exitStatus(exitFinding)
			}
			if err != nil {
				return err
			}
			if raw {
				newTextPrinter(e).Value(v.Value)
				return nil
			}
			// The index holds the value and receipt; the full record shape
			// (time, prev_hash, idempotency key) is in the segment.
			rec, err := db.Record(e.ctx, v.Anchor, v.Seq)
			if err != nil {
				return err
			}
			if rec.Hash != v.Hash {
				return errs.New(errs.CodeIndexMismatch, "key %q: the index names %s #%d with hash %s, the segment holds %s",
					key, v.Anchor, v.Seq, v.Hash, rec.Hash).At(v.Anchor, v.Seq, "", 0)
			}
			e.print.Found(&rec)
			return nil
		}
	},
}

var historyCmd = &command{
	name:    "history",
	args:    "KEY",
	summary: "print every version of KEY (puts and deletes) in merged order, oldest first",
	detail:  streamHelp,
	minArgs: 1, maxArgs: 1,
	setup: func(fs *pflag.FlagSet) runFunc {
		return func(e *env, args []string) error {
			db, err := e.openRead()
			if err != nil {
				return err
			}
			for rec, err := range db.History(e.ctx, []byte(args[0])) {
				if err != nil {
					return err
				}
				e.print.Record(&rec)
				if e.out.err != nil {
					return e.out.err
				}
			}
			return nil
		}
	},
}

var scanCmd = &command{
	name:    "scan",
	summary: "print the live keys in byte order with their latest records",
	detail: `With --prefix P only keys starting with P; with --start S and/or --end E the keys in
[S, E). Without either, every live key. Deleted keys are skipped.
` + streamHelp,
	minArgs: 0, maxArgs: 0,
	setup: func(fs *pflag.FlagSet) runFunc {
		var prefix, start, end string
		var limit int
		fs.StringVar(&prefix, "prefix", "", "only keys that start with this prefix")
		fs.StringVar(&start, "start", "", "first key of the range (inclusive)")
		fs.StringVar(&end, "end", "", "end of the range (exclusive; default: no end)")
		fs.IntVar(&limit, "limit", 0, "print at most this many keys (0: no limit)")
		return func(e *env, _ []string) error {
			ranged := fs.Changed("start") || fs.Changed("end")
			if ranged && fs.Changed("prefix") {
				return usagef("scan", "--prefix cannot be combined with --start/--end")
			}
			if limit < 0 {
				return usagef("scan", "--limit must not be negative")
			}
			db, err := e.openRead()
			if err != nil {
				return err
			}
			versions := db.Scan(e.ctx, []byte(prefix))
			if ranged {
				var endKey []byte
				if fs.Changed("end") {
					endKey = []byte(end)
				}
				versions = db.ScanRange(e.ctx, []byte(start), endKey)
			}
			n := 0
			for v, err := range versions {
				if err != nil {
					return err
				}
				if limit > 0 && n == limit {
					break
				}
				n++
				rec, err := db.Record(e.ctx, v.Anchor, v.Seq)
				if err != nil {
					return err
				}
				e.print.Record(&rec)
				if e.out.err != nil {
					return e.out.err
				}
			}
			return nil
		}
	},
}

var logCmd = &command{
	name:    "log",
	args:    "ANCHOR",
	summary: "print an anchor's records by seq",
	detail: `After a truncating compaction ("raw_log": "truncate") the records it removed are
gone but for the copies it kept (each key's last record in a removed segment), which
are printed like any other. A run of records that is gone is refused with STATE_003
(exit 1, after the records around it are printed), naming the run and the first seq
from which the log is held whole. An anchor the database does not hold is STATE_003;
a --from past the last record prints nothing.
` + streamHelp,
	minArgs: 1, maxArgs: 1,
	setup: func(fs *pflag.FlagSet) runFunc {
		var from, to uint64
		fs.Uint64Var(&from, "from", 1, "first seq to print")
		fs.Uint64Var(&to, "to", 0, "last seq to print (0: through the last record)")
		return func(e *env, args []string) error {
			if err := segment.ValidateAnchorID(args[0]); err != nil {
				return err
			}
			db, err := e.openRead()
			if err != nil {
				return err
			}
			var gone goneRuns
			for rec, err := range db.Log(e.ctx, args[0], from, to) {
				if err != nil {
					gone.add(err) // a run of removed records; any other error ends the loop
					continue
				}
				e.print.Record(&rec)
				if e.out.err != nil {
					return e.out.err
				}
			}
			return gone.err()
		}
	},
}

// goneRuns collects the errors a Log or Merged loop goes on past: each run
// of records a compaction removed is one STATE_003 in its place (any other
// error ends the loop by itself). The command prints what is held and
// then fails with the first.
type goneRuns struct {
	first error
	more  int
}

func (g *goneRuns) add(err error) {
	if g.first == nil {
		g.first = err
		return
	}
	g.more++
}

// err is the first error, with how many more runs followed it; nil when
// there was none.
func (g *goneRuns) err() error {
	switch {
	case g.first == nil:
		return nil
	case g.more == 0:
		return g.first
	}
	return fmt.Errorf("%w (and %s of removed records after it)", g.first, humanize.Plural(g.more, "more run"))
}
