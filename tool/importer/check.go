package importer

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/zeebo/blake3"
)

// Input is an import's input once pass 1 (Check) has read and checked
// every line. Close it when the import is done.
type Input struct {
	// Lines is the number of non-blank lines.
	Lines int

	limits segment.Limits
	// over maps the lines whose counter is above engine.MaxCallerCounter,
	// which only a retry may carry, by overKey of their anchor and
	// idempotency key, to the first such line of each (CheckRetries).
	over   map[[32]byte]int
	rewind io.ReadSeeker // what pass 2 reads again: the file, or the spool
	hasher *chunkHasher  // the file's chunk hashes; nil for a spool
	spool  *os.File
}

// Check is pass 1 of an import: it reads every line of r and checks it
// against limits (ParseLine), appending nothing. The first bad line is a
// *LineError naming it, with nothing imported.
//
// file is r itself when r is a regular file, which pass 2 then reads again
// (only bytes that match what pass 1 read: ErrChanged otherwise); nil when
// r is a stream (stdin, a pipe), which is copied as it is read to a spool
// file in the OS temp directory ($TMPDIR) that Close removes. Check removes
// it itself when it fails.
func Check(ctx context.Context, r io.Reader, file io.ReadSeeker, limits segment.Limits) (*Input, error) {
	in := &Input{limits: limits, over: map[[32]byte]int{}}
	if err := in.check(ctx, r, file); err != nil {
		in.Close()
		return nil, err
	}
	return in, nil
}

func (in *Input) check(ctx context.Context, r io.Reader, file io.ReadSeeker) error {
	src := r
	var spoolBuf *bufio.Writer
	if file != nil {
		in.hasher = newChunkHasher(r)
		src, in.rewind = in.hasher, file
	} else {
		// NB: a stream can be read only once: keep what pass 1 read.
		spool, err := os.CreateTemp("", "anchordb-import-*.jsonl")
		if err != nil {
			return errs.Wrap(errs.CodeWriteFailed, err, "create a spool file for the import input")
		}
		in.spool, in.rewind = spool, spool
		spoolBuf = bufio.NewWriterSize(spool, 1<<20)
	}
	var err error
	if in.Lines, err = checkLines(ctx, src, spoolBuf, in.limits, in.over); err != nil {
		return err
	}
	if spoolBuf != nil {
		if err := spoolBuf.Flush(); err != nil {
			return errs.Wrap(errs.CodeWriteFailed, err, "write the spool file of the import input")
		}
	}
	return nil
}

// Close removes the spool file, if there is one.
func (in *Input) Close() {
	if in.spool != nil {
		in.spool.Close()
		os.Remove(in.spool.Name())
		in.spool = nil
	}
}

// open returns a reader of the input from its start, yielding only the
// bytes pass 1 checked.
func (in *Input) open() (io.Reader, error) {
	if _, err := in.rewind.Seek(0, io.SeekStart); err != nil {
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "rewind the import input")
	}
	if in.hasher != nil {
		// A regular file is read again: what follows pass 1 gets only
		// bytes that match what was checked (chunks.go).
		return in.hasher.verifier(in.rewind), nil
	}
	return in.rewind, nil
}

// overKey identifies an anchor's idempotency key in Input.over.
func overKey(anchor string, key []byte) [32]byte {
	return blake3.Sum256(append(append([]byte(anchor), 0), key...))
}

// checkLines parses every line of r, copying each (with a newline, so the
// line numbers stay) to spool when spool is not nil, and noting in over the
// first line of each anchor's idempotency key that comes with a counter
// above engine.MaxCallerCounter. The first bad line is a LineError naming
// it, with nothing imported.
func checkLines(ctx context.Context, r io.Reader, spool *bufio.Writer, limits segment.Limits, over map[[32]byte]int) (int, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	lineNo, lines := 0, 0
	for {
		if err := ctx.Err(); err != nil {
			return lines, &LineError{Err: err}
		}
		line, err := readLine(br)
		if err == io.EOF {
			return lines, nil
		}
		lineNo++
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return lines, &LineError{Err: cerr} // interrupted while reading
			}
			return lines, &LineError{Line: lineNo, Err: err}
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
		ent, err := ParseLine(line, limits)
		if err != nil {
			return lines, &LineError{Line: lineNo, Err: err}
		}
		if ent.Counter > engine.MaxCallerCounter {
			k := overKey(ent.Anchor, ent.IdempotencyKey)
			if _, seen := over[k]; !seen {
				over[k] = lineNo
			}
		}
	}
}

// CheckRetries is the check between the passes of an import that holds
// lines with a counter above engine.MaxCallerCounter (with an idempotency
// key: ParseLine refuses one without). Such a line may only retry an
// append (CONTRACT §7); as a new append it is over a limit, which refuses the
// whole import before anything is appended (CONTRACT §9), as pass 1 refuses
// any other line over a limit. So the first line of each such key must
// find the key used already: by an earlier line of the input (it is then
// that line's duplicate, or conflicts with it, found as the lines are
// appended) or by an append db holds. It reads the input from its start;
// with no such line it reads nothing.
func (in *Input) CheckRetries(ctx context.Context, db *engine.DB) error {
	over := in.over
	if len(over) == 0 {
		return nil
	}
	r, err := in.open()
	if err != nil {
		return err
	}
	last := 0
	for _, n := range over {
		last = max(last, n)
	}
	br := bufio.NewReaderSize(r, 1<<20)
	for lineNo := 1; lineNo <= last; lineNo++ {
		if err := ctx.Err(); err != nil {
			return &LineError{Err: err}
		}
		line, err := readLine(br)
		if err == io.EOF {
			err = errs.Wrap(errs.CodeInvalidInput, ErrChanged, "it ends before line %d", lineNo)
		}
		if err != nil {
			return &LineError{Line: lineNo, Err: err}
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		ent, err := ParseLine(line, in.limits)
		if err != nil {
			return &LineError{Line: lineNo, Err: err} // pass 1 took it: a defect
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
		_, used, err := db.IdempotencyReceipt(ctx, ent.Anchor, ent.IdempotencyKey)
		if err != nil {
			return &LineError{Line: lineNo, Err: err}
		}
		if !used {
			return &LineError{Line: lineNo, Err: errs.New(errs.CodeInvalidInput,
				"counter %d is above the limit %d for a counter a caller supplies, and idempotency key %q retries no append of anchor %q (only a retry may carry such a counter)",
				ent.Counter, uint64(engine.MaxCallerCounter), ent.IdempotencyKey, ent.Anchor)}
		}
	}
	return nil
}
