// Package importer is `anchordb import` as a library: JSON lines in, atomic
// batches of appends out.
//
// An import runs in two passes so that bad input appends nothing. Check
// (pass 1) reads and checks every line — JSON syntax, fields, UTF-8, the
// limits — before anything is appended: the first bad line is a
// *LineError naming it, with nothing imported. Input.CheckRetries then
// checks, against the database, the lines whose counter only a retry may
// carry. Import (pass 2) reads the input again and appends it in atomic
// batches; a refusal that depends on the database's state (a counter not
// above its anchor's last, an idempotency key reused for another request)
// stops it at that line, with every line before it imported and nothing
// from it on.
//
// A regular file is read twice, and pass 2 appends only bytes whose hash
// (per MiB) matches what pass 1 read (chunks.go): a file changed between
// the passes stops the import with ErrChanged. Any other stream is copied
// to a spool file in the OS temp directory as pass 1 reads it.
//
// The line forms are those of the command line's import (README): the
// native {"anchor","type","key","value","idempotency_key","counter","time"}
// and the anchor-local event {"anchor_id","local_counter","event_type",
// "payload","timestamp"} (line.go).
package importer

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/humanize"
)

// Summary is what an import did: records appended, lines whose idempotency
// key had been used for the same request (nothing appended), and the
// non-blank lines read.
type Summary struct {
	Imported   int `json:"imported"`
	Duplicates int `json:"duplicates"`
	Lines      int `json:"lines"`
}

// LineError stops an import at a line. Imported and Duplicates count what
// the lines before it did; Line is 0 when the error is not about one line
// (an interrupt, a database that cannot write).
type LineError struct {
	Line                 int
	Imported, Duplicates int
	Err                  error
}

// Error is "line N: what is wrong (before it: X records imported, Y
// duplicates)".
func (e *LineError) Error() string {
	where := fmt.Sprintf("line %d: ", e.Line)
	if e.Line == 0 {
		where = ""
	}
	return fmt.Sprintf("%s%s (before it: %s imported, %s)", where, errs.Message(e.Err),
		humanize.Plural(e.Imported, "record"), humanize.Plural(e.Duplicates, "duplicate"))
}

// Unwrap returns the error that stopped the import; its code is the
// import's.
func (e *LineError) Unwrap() error { return e.Err }

// DefaultBatchBytes bounds the keys and values of one batch (counted as
// engine.MaxBatchBytes counts them) when Importer.BatchBytes is 0: 1,000
// lines of 16 MiB values would otherwise be held at once.
const DefaultBatchBytes = 64 << 20

// Importer is pass 2: it appends a checked input in atomic batches.
type Importer struct {
	DB *engine.DB
	// Options are those of every batch's append (engine.WithNoSync).
	Options []engine.WriteOption
	// Batch is the most lines one atomic batch appends (at least 1).
	Batch int
	// BatchBytes ends a batch early once its keys and values reach it;
	// 0 is DefaultBatchBytes.
	BatchBytes int64
	// Progress, if set, is called after each batch with what the import
	// has done so far.
	Progress func(Summary)

	entries []engine.Entry
	lineNos []int // the input line of each pending entry
	bytes   int64 // what the pending entries count toward engine.MaxBatchBytes
	done    Summary
}

// Import appends the lines of in, which Check read, from its start. It
// returns what it did; when it stops early, the error is a *LineError
// whose counts say what the lines before it did.
func (im *Importer) Import(ctx context.Context, in *Input) (Summary, error) {
	r, err := in.open()
	if err != nil {
		return im.done, err
	}
	err = im.run(ctx, r)
	return im.done, err
}

func (im *Importer) run(ctx context.Context, in io.Reader) error {
	limits := im.DB.Options().Limits
	batch, batchBytes := max(im.Batch, 1), im.BatchBytes
	if batchBytes <= 0 {
		batchBytes = DefaultBatchBytes
	}
	r := bufio.NewReaderSize(in, 1<<20)
	lineNo := 0
	for {
		line, err := readLine(r)
		if err == io.EOF {
			break
		}
		lineNo++
		if err != nil {
			if ferr := im.flush(ctx); ferr != nil {
				return ferr
			}
			return im.stop(lineNo, err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		im.done.Lines++
		ent, err := ParseLine(line, limits)
		if err != nil {
			// Pass 1 accepted every line and pass 2 reads only bytes
			// that match it (chunkVerifier), so this is a defect, not a
			// changed file. Everything before the failing line is
			// imported, nothing from it on.
			if ferr := im.flush(ctx); ferr != nil {
				return ferr
			}
			return im.stop(lineNo, err)
		}
		im.entries = append(im.entries, ent)
		im.lineNos = append(im.lineNos, lineNo)
		im.bytes += int64(len(ent.Key) + len(ent.Value) + len(ent.IdempotencyKey) + engine.RecordOverhead)
		// Lines are held until their batch is appended: a byte bound as
		// well as Batch keeps that memory small whatever the values.
		if len(im.entries) >= batch || im.bytes >= batchBytes {
			if err := im.flush(ctx); err != nil {
				return err
			}
			if im.Progress != nil {
				im.Progress(im.done)
			}
		}
		if err := ctx.Err(); err != nil {
			return im.stop(0, err)
		}
	}
	return im.flush(ctx)
}

// stop is the error that stops the import at line (0: at no line).
func (im *Importer) stop(line int, err error) error {
	return &LineError{Line: line, Imported: im.done.Imported, Duplicates: im.done.Duplicates, Err: err}
}

// maxLine bounds one input line: a value at the 16 MiB limit in base64 with
// a key at its limit, with room for JSON escapes.
const maxLine = 128 << 20

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
func (im *Importer) flush(ctx context.Context) error {
	if len(im.entries) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		// Interrupted: no append starts after the context ended.
		return im.stop(0, err)
	}
	entries, lineNos := im.entries, im.lineNos
	im.entries, im.lineNos, im.bytes = im.entries[:0], im.lineNos[:0], 0
	n, err := im.appendPrefix(ctx, entries)
	if err != nil {
		line := lineNos[n]
		if !bisectable(err) {
			line = 0 // the failure is not about one line
		}
		return im.stop(line, err)
	}
	return nil
}

// appendPrefix appends entries, or if that fails the longest prefix that
// succeeds; it returns how many were appended and the error of the next.
func (im *Importer) appendPrefix(ctx context.Context, entries []engine.Entry) (int, error) {
	rs, err := im.DB.AppendBatch(ctx, entries, im.Options...)
	if err == nil {
		for _, r := range rs {
			if r.Duplicate {
				im.done.Duplicates++
			} else {
				im.done.Imported++
			}
		}
		return len(entries), nil
	}
	if len(entries) == 1 || !bisectable(err) {
		return 0, err
	}
	half := len(entries) / 2
	n, err := im.appendPrefix(ctx, entries[:half])
	if err != nil {
		return n, err
	}
	m, err := im.appendPrefix(ctx, entries[half:])
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
