package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
)

// output is the buffered stdout of a command. It remembers the first write
// error, so a stream stops as soon as its reader goes away.
type output struct {
	w   *bufio.Writer
	err error
}

func newOutput(w io.Writer) *output { return &output{w: bufio.NewWriterSize(w, 64<<10)} }

// json prints v as one line of JSON (no HTML escaping).
func (o *output) json(v any) {
	if o.err != nil {
		return
	}
	b, err := marshal(v)
	if err != nil {
		o.err = err
		return
	}
	b = append(b, '\n')
	_, o.err = o.w.Write(b)
}

// linef prints one line of human output.
func (o *output) linef(format string, args ...any) {
	if o.err != nil {
		return
	}
	_, o.err = fmt.Fprintf(o.w, format+"\n", args...)
}

// write prints raw bytes (get --raw).
func (o *output) write(b []byte) {
	if o.err != nil {
		return
	}
	_, o.err = o.w.Write(b)
}

func (o *output) flush() error {
	if o.err != nil {
		return o.err
	}
	o.err = o.w.Flush()
	return o.err
}

// brokenPipe reports whether err is stdout's reader going away.
func (o *output) brokenPipe(err error) bool { return errors.Is(err, syscall.EPIPE) }

// marshal is json.Marshal without HTML escaping and without a trailing newline.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// timeFormat is RFC 3339 in UTC with exactly nine fractional digits.
const timeFormat = "2006-01-02T15:04:05.000000000Z"

func formatTime(t time.Time) string {
	return t.UTC().Format(timeFormat)
}

// codeOf is the code an error is reported under: its own, or IO_001 for an
// error without one (the CLI's catch-all for failures of the system).
func codeOf(err error) errs.Code {
	if c := engine.CodeOf(err); c != "" {
		return c
	}
	return errs.CodeWriteFailed
}

// messageOf is err's message without the "CODE reason: " the coded errors
// print, since the JSON shape (and errorLine) carries those separately
// (errs.Message: every code is dropped, however deep the coded cause).
func messageOf(err error) string { return errs.Message(err) }
