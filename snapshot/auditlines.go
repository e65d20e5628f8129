package snapshot

import (
	"bytes"
	"errors"
	"io"
)

// errLineTooLong is lineReader's refusal of a line longer than its bound.
var errLineTooLong = errors.New("line too long")

// lineReader reads newline-ended lines of at most max bytes, newline
// included. Its buffer starts at the size it is given and doubles, up to
// max, only while one line does not fit: a scan allocates for the longest
// line the log holds, not for the longest it may hold.
//
// NB: it replaces a bufio.Reader of max bytes (maxAuditLine+1, 1 MiB),
// which every scan of the audit log allocated in full — verify,
// compaction, rebuild and open each scan it, and FuzzAuditLog ran at about
// 900 inputs a second for it. What it accepts is what that reader
// accepted: a line of up to max bytes with its newline, and at the end a
// tail without one of fewer than max bytes.
type lineReader struct {
	r      io.Reader
	buf    []byte
	start  int   // buf[start:end] is read and not yet returned
	end    int   //
	err    error // what ended the input (io.EOF at its end); sticky
	max    int
	noRead int // reads in a row that returned nothing
}

// newLineReader reads lines of at most limit bytes from r with a first
// buffer of size bytes (at least 16, at most limit).
func newLineReader(r io.Reader, size, limit int) *lineReader {
	return &lineReader{r: r, buf: make([]byte, min(max(size, 16), limit)), max: limit}
}

// next returns the next line with its newline; the slice is valid until
// the next call. At the end of the input it returns what is left after
// the last newline (empty when nothing is) with the error that ended the
// input, io.EOF at a clean end. A line of more than max bytes, or a tail
// of max bytes or more, is errLineTooLong.
func (lr *lineReader) next() ([]byte, error) {
	scanned := 0 // bytes of buf[start:end] known to hold no newline
	for {
		if i := bytes.IndexByte(lr.buf[lr.start+scanned:lr.end], '\n'); i >= 0 {
			line := lr.buf[lr.start : lr.start+scanned+i+1]
			lr.start += scanned + i + 1
			return line, nil
		}
		scanned = lr.end - lr.start
		if scanned >= lr.max {
			return nil, errLineTooLong
		}
		if lr.err != nil {
			line := lr.buf[lr.start:lr.end]
			lr.start = lr.end
			return line, lr.err
		}
		lr.fill()
	}
}

// atEnd reports whether the input ends after what next returned: no byte
// follows, and the read that said so ended with io.EOF. A read that failed
// before a byte or the end was seen is the error: it does not say which.
func (lr *lineReader) atEnd() (bool, error) {
	for lr.start == lr.end {
		if lr.err != nil {
			if errors.Is(lr.err, io.EOF) {
				return true, nil
			}
			return false, lr.err
		}
		lr.fill()
	}
	return false, nil
}

// fill reads once more into the buffer, moving the unread bytes to its
// start and growing it when they fill it.
func (lr *lineReader) fill() {
	if lr.start > 0 {
		lr.end = copy(lr.buf, lr.buf[lr.start:lr.end])
		lr.start = 0
	}
	if lr.end == len(lr.buf) {
		// next checked end < max, so the buffer may grow.
		grown := make([]byte, min(2*len(lr.buf), lr.max))
		copy(grown, lr.buf[:lr.end])
		lr.buf = grown
	}
	n, err := lr.r.Read(lr.buf[lr.end:])
	lr.end += n
	switch {
	case err != nil:
		lr.err = err
	case n > 0:
		lr.noRead = 0
	default:
		// As bufio does: a reader that keeps returning nothing, and no
		// error, must not make the scan spin.
		if lr.noRead++; lr.noRead >= 100 {
			lr.err = io.ErrNoProgress
		}
	}
}
