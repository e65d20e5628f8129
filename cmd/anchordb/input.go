package main

import (
	"context"
	"io"
	"os"

	"github.com/anchordb/anchordb/internal/errs"
)

// NB: a read of stdin, a pipe or a FIFO blocks in the kernel until data
// comes, and nothing interrupts it: Ctrl-C would be noticed only when the
// next line arrived (never, if the producer idles), with the database lock
// held. The readers here make such reads, and the open of a FIFO, return
// at once when the command's context ends; the blocked system call is left
// behind in a goroutine and ends with the process.

// ctxReader reads r, returning ctx's error as soon as ctx ends even while a
// read of r is blocked.
type ctxReader struct {
	ctx     context.Context
	r       io.Reader
	buf     []byte // the one in-flight read's buffer (never the caller's)
	results chan readResult
	pending bool // a read of r is in flight
}

type readResult struct {
	n   int
	err error
}

// maxChunk bounds one read of the underlying reader.
const maxChunk = 1 << 20

func newCtxReader(ctx context.Context, r io.Reader) *ctxReader {
	return &ctxReader{ctx: ctx, r: r, results: make(chan readResult, 1)}
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !c.pending {
		// NB: the read fills c.buf, not p: after a cancellation it may still
		// complete, and p then belongs to the caller again.
		n := min(len(p), maxChunk)
		if cap(c.buf) < n {
			c.buf = make([]byte, n)
		}
		buf := c.buf[:n]
		c.pending = true
		go func() {
			n, err := c.r.Read(buf)
			c.results <- readResult{n, err}
		}()
	}
	select {
	case <-c.ctx.Done():
		return 0, c.ctx.Err()
	case res := <-c.results:
		c.pending = false
		// The read was of at most len(p) bytes, so all of it fits.
		return copy(p, c.buf[:res.n]), res.err
	}
}

// openInput opens the file name for reading, giving up when ctx ends (the
// open of a FIFO blocks until a writer opens it too). regular reports a
// regular file; anything else is wrapped so that its reads end with ctx.
func openInput(ctx context.Context, name string) (f *os.File, in io.Reader, regular bool, err error) {
	type opened struct {
		f   *os.File
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		f, err := os.Open(name)
		ch <- opened{f, err}
	}()
	select {
	case <-ctx.Done():
		go func() { // close it if the open completes after all
			if o := <-ch; o.f != nil {
				o.f.Close()
			}
		}()
		return nil, nil, false, ctx.Err()
	case o := <-ch:
		if o.err != nil {
			return nil, nil, false, o.err
		}
		f = o.f
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, false, err
	}
	if st.Mode().IsRegular() {
		return f, f, true, nil
	}
	if st.IsDir() {
		// A wrong argument, not an I/O failure (INPUT_001, exit 2).
		f.Close()
		return nil, nil, false, errs.New(errs.CodeInvalidInput, "%s is a directory, not a file", name)
	}
	return f, newCtxReader(ctx, f), false, nil
}
