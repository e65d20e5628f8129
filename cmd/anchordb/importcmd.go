package main

import (
	"io"
	"os"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/humanize"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/tool/importer"
	"github.com/spf13/pflag"
)

var importCmd = &command{
	name:    "import",
	args:    "FILE",
	summary: "bulk-append JSON lines from FILE ('-' for stdin)",
	detail: `Each non-blank line is one record, in either of two forms:

  {"anchor":"a","type":"put","key":"k","value":"v","idempotency_key":"op-1","counter":42,"time":"…"}
      type defaults to "put" when absent or null (an empty one is refused); key, value
      and idempotency_key are a JSON string or {"b64":"<standard base64>"}, and an
      idempotency_key, when given, is 1..256 bytes; counter (1..2^62-1; above, only to retry an append made with one) and time (RFC 3339) are optional:
      without them the database clock assigns the counter and the time is now.
      Unknown fields are refused.
  {"anchor_id":"a","local_counter":5,"event_type":"T","payload":…,"timestamp":"…"}
      an anchor-local event line: local_counter becomes the counter, event_type the
      type, the payload the value (a JSON string as its bytes, anything else as its
      compact JSON encoding), timestamp (RFC 3339, optional) the record time. Optional
      key and idempotency_key as above; other fields are ignored.

The import runs in two passes. The first reads and checks every line — JSON syntax,
field names and types, a field given twice, UTF-8, the limits (anchor id, type, key,
value, idempotency key, counter, time) — before the database is opened: if any line is
malformed or over a limit, nothing is appended (the database is not even created), and
the error is INPUT_001 (exit 2) naming the first such line, with "imported":0. A
regular FILE is read twice, and the second pass appends only bytes whose hash (per MiB)
matches the first's: a file changed in between stops the import with INPUT_001 at the
first line not appended, counting what was. stdin or a pipe is copied to a temporary file in the OS temp
directory ($TMPDIR) as it is checked, removed when the import ends, also on an error or
an interrupt.

A counter above 2^62-1 is one only a retry may carry (it is a new append's limit):
between the passes each such line is checked against the database, and when its
idempotency key retries neither an append the database holds nor an earlier line of
the input, the whole import is refused in the same way (INPUT_001 naming the line,
"imported":0, and a database the import created is removed again).

The second pass appends the lines in atomic batches of --batch lines (fewer when
their keys and values pass 64 MiB). Other refusals that
depend on the database's state can only be found then: a counter not above its anchor's
last, or an idempotency key reused for another request, is STATE_002 (exit 1). On such a
refusal the import stops: every line before the refused one has been imported (the
batches before it, and the lines before it in its own batch) and nothing from it on; the
error names the line and counts the records imported before it. Lines with idempotency
keys make a re-run safe: they come back as duplicates.

Prints a summary: {"imported":N,"duplicates":M,"lines":L} — records appended, lines whose
idempotency key had been used for the same request (nothing appended), non-blank lines.`,
	minArgs: 1, maxArgs: 1,
	setup: func(fs *pflag.FlagSet) runFunc {
		var batch int
		var noSync bool
		var segSize int64
		fs.IntVar(&batch, "batch", 1000, "lines per atomic batch append")
		fs.BoolVar(&noSync, "no-sync", false, "return from each batch once it reaches the OS, without waiting for the fsync")
		segmentSizeFlag(fs, &segSize)
		return func(e *env, args []string) error {
			if batch < 1 || batch > 1<<20 {
				return usagef("import", "--batch must be 1..%d", 1<<20)
			}
			// Pass 1: every line is checked before the database is opened,
			// so a malformed or over-limit line anywhere appends nothing.
			input, err := checkImportInput(e, args[0])
			if input != nil {
				defer input.Close()
			}
			if err != nil {
				return err
			}
			db, err := e.openOrCreate(segSize)
			if err != nil {
				return err
			}
			// Lines whose counter only a retry may carry are checked
			// against the database before anything is appended.
			if err := input.CheckRetries(e.ctx, db); err != nil {
				return err
			}
			// Pass 2: append.
			prog := e.newProgress()
			im := &importer.Importer{DB: db, Batch: batch, Progress: func(s importer.Summary) {
				prog.Update("import: %d of %s, %s imported", s.Lines, humanize.Plural(input.Lines, "line"), humanize.Plural(s.Imported, "record"))
			}}
			if noSync {
				im.Options = []engine.WriteOption{engine.WithNoSync(true)}
			}
			sum, err := im.Import(e.ctx, input.Input)
			prog.Done()
			if err != nil {
				return err
			}
			e.print.Import(sum)
			return nil
		}
	},
}

// checkImportInput opens FILE ('-': stdin) and runs pass 1 of the import
// over it (importer.Check). A regular file is read again by pass 2; any
// other (stdin, a pipe, a FIFO) is read with the command's context, so an
// interrupt ends a read that waits for a writer. The input's Close closes
// the file as well; it is non-nil whenever a file was opened.
func checkImportInput(e *env, name string) (*importInput, error) {
	limits := segment.DefaultLimits()
	if name == "-" {
		in, err := importer.Check(e.ctx, e.stdin, nil, limits)
		return &importInput{Input: in}, err
	}
	f, r, regular, err := openInput(e.ctx, name)
	if err != nil {
		if e.ctx.Err() != nil {
			return nil, err
		}
		return nil, errs.Wrap(errs.CodeInvalidInput, err, "open import file")
	}
	var file io.ReadSeeker
	if regular {
		file = f
	}
	in, err := importer.Check(e.ctx, r, file, limits)
	return &importInput{Input: in, file: f}, err
}

// importInput is an import's checked input and the file it was read from.
type importInput struct {
	*importer.Input
	file *os.File
}

// Close removes the input's spool file and closes its file.
func (in *importInput) Close() {
	if in.Input != nil {
		in.Input.Close()
	}
	if in.file != nil {
		in.file.Close()
	}
}
