package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/spf13/pflag"
	"github.com/zeebo/blake3"
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
			limits := segment.DefaultLimits()
			input, cleanup, err := checkImportInput(e, args[0], limits)
			defer cleanup()
			if err != nil {
				return err
			}
			db, err := e.openOrCreate(segSize)
			if err != nil {
				return err
			}
			// Lines whose counter only a retry may carry are checked
			// against the database before anything is appended.
			if len(input.over) > 0 {
				in, err := input.open()
				if err != nil {
					return err
				}
				if err := checkRetries(e, db, in, input.over, limits); err != nil {
					return err
				}
			}
			// Pass 2: append.
			in, err := input.open()
			if err != nil {
				return err
			}
			im := &importer{e: e, db: db, limits: db.Options().Limits, batch: batch, prog: e.newProgress(), total: input.lines}
			if noSync {
				im.opts = []engine.WriteOption{engine.WithNoSync(true)}
			}
			err = im.run(in)
			im.prog.done()
			if err != nil {
				return err
			}
			if e.g.json {
				e.out.json(importSummary{Imported: im.imported, Duplicates: im.duplicates, Lines: im.lines})
			} else if !e.g.quiet {
				e.out.linef("imported %s, %s, from %s", plural(im.imported, "record"), plural(im.duplicates, "duplicate"), plural(im.lines, "line"))
			}
			return nil
		}
	},
}

type importSummary struct {
	Imported   int `json:"imported"`
	Duplicates int `json:"duplicates"`
	Lines      int `json:"lines"`
}

// importError stops an import at a line. imported and duplicates count what
// the lines before it did.
type importError struct {
	line                 int // 0: not a particular line
	imported, duplicates int
	err                  error
}

func (e *importError) Error() string {
	where := fmt.Sprintf("line %d: ", e.line)
	if e.line == 0 {
		where = ""
	}
	return fmt.Sprintf("%s%s (before it: %s imported, %s)", where, messageOf(e.err),
		plural(e.imported, "record"), plural(e.duplicates, "duplicate"))
}

// plural is "1 noun" or "n nouns" (or, given, n and the plural form).
func plural[N ~int | ~int64 | ~uint64 | ~uint32](n N, noun string, nouns ...string) string {
	if n == 1 {
		return "1 " + noun
	}
	if len(nouns) > 0 {
		return fmt.Sprintf("%d %s", n, nouns[0])
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func (e *importError) Unwrap() error { return e.err }

// importInput is an import's input once pass 1 has checked it.
type importInput struct {
	lines int // non-blank
	// over maps the lines whose counter is above engine.MaxCallerCounter,
	// which only a retry may carry, by overKey of their anchor and
	// idempotency key, to the first such line of each (checkRetries).
	over map[[32]byte]int
	// open returns a reader of the input from its start, yielding only
	// the bytes pass 1 checked.
	open func() (io.Reader, error)
}

// overKey identifies an anchor's idempotency key in importInput.over.
func overKey(anchor string, key []byte) [32]byte {
	return blake3.Sum256(append(append([]byte(anchor), 0), key...))
}

// checkImportInput is the first pass of an import: it parses and checks
// every line of FILE ('-': stdin) against limits, appending nothing, and
// returns the input, to be read again from its start. A regular file is read
// again; stdin, a pipe or any other stream is copied to a spool file in the
// OS temp directory as it is checked, which cleanup removes (call it in
// every case, also after an error).
func checkImportInput(e *env, name string, limits segment.Limits) (input importInput, cleanup func(), err error) {
	var closers []func()
	cleanup = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	var src io.Reader = e.stdin
	var file *os.File
	var hasher *chunkHasher
	if name != "-" {
		f, in, regular, err := openInput(e.ctx, name)
		if err != nil {
			if e.ctx.Err() != nil {
				return input, cleanup, err
			}
			return input, cleanup, errs.Wrap(errs.CodeInvalidInput, err, "open import file")
		}
		closers = append(closers, func() { f.Close() })
		src = in
		if regular {
			file = f
			hasher = newChunkHasher(in)
			src = hasher
		}
	}
	var spool *os.File
	var spoolBuf *bufio.Writer
	if file == nil {
		// NB: a stream can be read only once: keep what pass 1 read.
		spool, err = os.CreateTemp("", "anchordb-import-*.jsonl")
		if err != nil {
			return input, cleanup, errs.Wrap(errs.CodeWriteFailed, err, "create a spool file for the import input")
		}
		closers = append(closers, func() { spool.Close(); os.Remove(spool.Name()) })
		spoolBuf = bufio.NewWriterSize(spool, 1<<20)
	}
	input.over = map[[32]byte]int{}
	input.lines, err = checkLines(e, src, spoolBuf, limits, input.over)
	if err != nil {
		return input, cleanup, err
	}
	rewind := file
	if spool != nil {
		if err := spoolBuf.Flush(); err != nil {
			return input, cleanup, errs.Wrap(errs.CodeWriteFailed, err, "write the spool file of the import input")
		}
		rewind = spool
	}
	input.open = func() (io.Reader, error) {
		if _, err := rewind.Seek(0, io.SeekStart); err != nil {
			return nil, errs.Wrap(errs.CodeWriteFailed, err, "rewind the import input")
		}
		if hasher != nil {
			// A regular file is read again: what follows pass 1 gets
			// only bytes that match what was checked (importverify.go).
			return hasher.verifier(rewind), nil
		}
		return rewind, nil
	}
	return input, cleanup, nil
}

// checkLines parses every line of r, copying each (with a newline, so the
// line numbers stay) to spool when spool is not nil, and noting in over the
// first line of each anchor's idempotency key that comes with a counter
// above engine.MaxCallerCounter. The first bad line is an importError
// naming it, with nothing imported.
func checkLines(e *env, r io.Reader, spool *bufio.Writer, limits segment.Limits, over map[[32]byte]int) (int, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	lineNo, lines := 0, 0
	for {
		if err := e.ctx.Err(); err != nil {
			return lines, &importError{err: err}
		}
		line, err := readLine(br)
		if err == io.EOF {
			return lines, nil
		}
		lineNo++
		if err != nil {
			if cerr := e.ctx.Err(); cerr != nil {
				return lines, &importError{err: cerr} // interrupted while reading
			}
			return lines, &importError{line: lineNo, err: err}
		}
		if spool != nil {
			_, err := spool.Write(line)
			if err == nil {
				err = spool.WriteByte('\n')
			}
			if err != nil {
				return lines, errs.Wrap(errs.CodeWriteFailed, err, "write the spool file of the import input")
			}
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		lines++
		ent, err := parseImportLine(line, limits)
		if err != nil {
			return lines, &importError{line: lineNo, err: err}
		}
		if ent.Counter > engine.MaxCallerCounter {
			k := overKey(ent.Anchor, ent.IdempotencyKey)
			if _, seen := over[k]; !seen {
				over[k] = lineNo
			}
		}
	}
}

// checkRetries is the check between the passes of an import that holds
// lines with a counter above engine.MaxCallerCounter (with an idempotency
// key: parseImportLine refuses one without). Such a line may only retry an
// append (SPEC §7); as a new append it is over a limit, which refuses the
// whole import before anything is appended (SPEC §9), as pass 1 refuses
// any other line over a limit. So the first line of each such key (over)
// must find the key used already: by an earlier line of the input (it is
// then that line's duplicate, or conflicts with it, found as the lines are
// appended) or by an append the database holds. r reads the input from its
// start; over is consumed.
func checkRetries(e *env, db *engine.DB, r io.Reader, over map[[32]byte]int, limits segment.Limits) error {
	last := 0
	for _, n := range over {
		last = max(last, n)
	}
	br := bufio.NewReaderSize(r, 1<<20)
	for lineNo := 1; lineNo <= last; lineNo++ {
		if err := e.ctx.Err(); err != nil {
			return &importError{err: err}
		}
		line, err := readLine(br)
		if err == io.EOF {
			err = errs.Wrap(errs.CodeInvalidInput, errImportChanged, "it ends before line %d", lineNo)
		}
		if err != nil {
			return &importError{line: lineNo, err: err}
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		ent, err := parseImportLine(line, limits)
		if err != nil {
			return &importError{line: lineNo, err: err} // pass 1 took it: a defect
		}
		if len(ent.IdempotencyKey) == 0 {
			continue
		}
		k := overKey(ent.Anchor, ent.IdempotencyKey)
		first, ok := over[k]
		if !ok || lineNo > first {
			continue
		}
		delete(over, k)
		if lineNo < first {
			continue // the over-limit line retries this one
		}
		_, used, err := db.IdempotencyReceipt(e.ctx, ent.Anchor, ent.IdempotencyKey)
		if err != nil {
			return &importError{line: lineNo, err: err}
		}
		if !used {
			return &importError{line: lineNo, err: errs.New(errs.CodeInvalidInput,
				"counter %d is above the limit %d for a counter a caller supplies, and idempotency key %q retries no append of anchor %q (only a retry may carry such a counter)",
				ent.Counter, uint64(engine.MaxCallerCounter), ent.IdempotencyKey, ent.Anchor)}
		}
	}
	return nil
}

// maxLine bounds one input line: a value at the 16 MiB limit in base64 with
// a key at its limit, with room for JSON escapes.
const maxLine = 128 << 20

type importer struct {
	e      *env
	db     *engine.DB
	limits segment.Limits
	opts   []engine.WriteOption
	batch  int
	prog   *progress

	entries []engine.Entry
	lineNos []int // the input line of each pending entry
	bytes   int64 // what the pending entries count toward engine.MaxBatchBytes
	total   int   // the non-blank lines pass 1 counted

	lines, imported, duplicates int
}

// importBatchBytes bounds the keys and values of one import batch (counted
// as engine.MaxBatchBytes counts them): 1,000 lines of 16 MiB values would
// otherwise be held at once. A variable for tests.
var importBatchBytes int64 = 64 << 20

func (im *importer) run(in io.Reader) error {
	r := bufio.NewReaderSize(in, 1<<20)
	lineNo := 0
	for {
		line, err := readLine(r)
		if err == io.EOF {
			break
		}
		lineNo++
		if err != nil {
			if ferr := im.flush(); ferr != nil {
				return ferr
			}
			return &importError{line: lineNo, imported: im.imported, duplicates: im.duplicates, err: err}
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		im.lines++
		ent, err := parseImportLine(line, im.limits)
		if err != nil {
			// Pass 1 accepted every line and pass 2 reads only bytes
			// that match it (chunkVerifier), so this is a defect, not a
			// changed file. Everything before the failing line is
			// imported, nothing from it on.
			if ferr := im.flush(); ferr != nil {
				return ferr
			}
			return &importError{line: lineNo, imported: im.imported, duplicates: im.duplicates, err: err}
		}
		im.entries = append(im.entries, ent)
		im.lineNos = append(im.lineNos, lineNo)
		im.bytes += int64(len(ent.Key) + len(ent.Value) + len(ent.IdempotencyKey) + engine.RecordOverhead)
		// Lines are held until their batch is appended: a byte bound as
		// well as --batch keeps that memory small whatever the values.
		if len(im.entries) >= im.batch || im.bytes >= importBatchBytes {
			if err := im.flush(); err != nil {
				return err
			}
			im.prog.update("import: %d of %s, %s imported", im.lines, plural(im.total, "line"), plural(im.imported, "record"))
		}
		if err := im.e.ctx.Err(); err != nil {
			return &importError{imported: im.imported, duplicates: im.duplicates, err: err}
		}
	}
	return im.flush()
}

// readLine returns the next line without its newline; io.EOF at the end.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > maxLine {
			// Skip the rest of the line so the error names the right one.
			for err == bufio.ErrBufferFull {
				_, err = r.ReadSlice('\n')
			}
			return nil, errs.New(errs.CodeInvalidInput, "line is longer than %d bytes", maxLine)
		}
		line = append(line, chunk...)
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF:
			if len(line) == 0 {
				return nil, io.EOF
			}
			return line, nil
		case err != nil:
			if errs.CodeOf(err) != "" {
				return nil, err // the reader's own finding, such as a changed file
			}
			return nil, errs.Wrap(errs.CodeWriteFailed, err, "read import input")
		}
		return bytes.TrimSuffix(bytes.TrimSuffix(line, []byte{'\n'}), []byte{'\r'}), nil
	}
}

// flush appends the pending entries. AppendBatch is atomic, so when it fails
// nothing was appended: the failing entry is then found by bisection, every
// entry before it committed, and the error names its line.
func (im *importer) flush() error {
	if len(im.entries) == 0 {
		return nil
	}
	if err := im.e.ctx.Err(); err != nil {
		// Interrupted: no append starts after the context ended.
		return &importError{imported: im.imported, duplicates: im.duplicates, err: err}
	}
	entries, lineNos := im.entries, im.lineNos
	im.entries, im.lineNos, im.bytes = im.entries[:0], im.lineNos[:0], 0
	n, err := im.appendPrefix(entries)
	if err != nil {
		line := lineNos[n]
		if !bisectable(err) {
			line = 0 // the failure is not about one line
		}
		return &importError{line: line, imported: im.imported, duplicates: im.duplicates, err: err}
	}
	return nil
}

// appendPrefix appends entries, or if that fails the longest prefix that
// succeeds; it returns how many were appended and the error of the next.
func (im *importer) appendPrefix(entries []engine.Entry) (int, error) {
	rs, err := im.db.AppendBatch(im.e.ctx, entries, im.opts...)
	if err == nil {
		for _, r := range rs {
			if r.Duplicate {
				im.duplicates++
			} else {
				im.imported++
			}
		}
		return len(entries), nil
	}
	if len(entries) == 1 || !bisectable(err) {
		return 0, err
	}
	half := len(entries) / 2
	n, err := im.appendPrefix(entries[:half])
	if err != nil {
		return n, err
	}
	m, err := im.appendPrefix(entries[half:])
	return half + m, err
}

// bisectable reports whether a failed batch failed because of one of its
// entries (a refusal that a smaller batch would not repeat), rather than
// because the database or the process cannot write at all.
func bisectable(err error) bool {
	switch c := engine.CodeOf(err); {
	case c == errs.CodeConflict, c == errs.CodeInvalidInput, c == errs.CodeDependencyMissing:
		return true
	case c.IsIntegrity(): // a damaged, read-only anchor
		return true
	}
	return false
}
