package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// openHookFS calls hook (once armed) on every Open of a path containing
// match.
type openHookFS struct {
	vfs.FS
	match string
	armed atomic.Bool
	hook  func()
}

func (fs *openHookFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	if fs.armed.Load() && strings.Contains(name, fs.match) {
		fs.armed.Store(false)
		fs.hook()
	}
	return fs.FS.Open(name, opts...)
}

// TestIngestRacingCloseDoesNotReadClosedIndex: an ingest reads our index
// while it checks the arriving logs (our heads, the rows it must agree
// with, the idempotency keys the arrivals must not reuse) before it
// appends anything. Close, which a caller may run from another goroutine
// (a signal handler), closes the index once admission is drained, and
// nothing of the ingest was admitted then: its reads hit a closed Pebble,
// which panics ("pebble: closed") and takes the process with it instead of
// the ingest failing with IO_001 "database is closed" (as an append racing
// Close does, TestReviewDuplicateRacingClose).
func TestIngestRacingCloseDoesNotReadClosedIndex(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	src, err := Open("src", Options{FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		for i := 0; i < 3; i++ {
			e := Entry{Anchor: id, Type: segment.TypePut, Key: []byte(fmt.Sprint(i)), Value: []byte("v"), IdempotencyKey: []byte(fmt.Sprint("op-", i))}
			if _, err := src.Append(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	hfs := &openHookFS{FS: mem, match: "src"}
	dst, err := Open("dst", Options{FS: hfs})
	if err != nil {
		t.Fatal(err)
	}
	// Armed once the ingest's barrier reaches the applier: the next source
	// file opened is in pass 1. The hook is set before the first append
	// (the applier reads it), and arms only once the ingest has begun.
	var ingesting atomic.Bool
	dst.testBeforeApply = func() {
		if ingesting.Load() {
			hfs.armed.Store(true)
		}
	}
	if _, err := dst.Put(ctx, "other", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.Get(ctx, []byte("k")); err != nil { // applied: it arms nothing later
		t.Fatal(err)
	}
	// Close from another goroutine, in the middle of pass 1: the hook
	// returns once Close has begun and either finished or waits for the
	// ingest.
	var closeErr error
	closed := make(chan struct{})
	hfs.hook = func() {
		go func() {
			defer close(closed)
			closeErr = dst.Close()
		}()
		for !dst.adm.Closing() {
			time.Sleep(time.Millisecond)
		}
		select {
		case <-closed:
		case <-time.After(200 * time.Millisecond):
		}
	}
	ingesting.Store(true)

	var rep IngestReport
	var ierr error
	func() {
		defer func() {
			if r := recover(); r != nil {
				ierr = fmt.Errorf("panic: %v", r)
			}
		}()
		rep, ierr = dst.Ingest(ctx, "src", IngestOptions{})
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return after the ingest ended")
	}
	if closeErr != nil {
		t.Fatalf("close: %v", closeErr)
	}
	if ierr == nil {
		t.Fatalf("the ingest after Close closed the database succeeded: %+v", rep)
	}
	if !errors.Is(ierr, ErrWriteFailed) || strings.HasPrefix(ierr.Error(), "panic") {
		t.Fatalf("ingest racing Close: %v; want IO_001 database is closed", ierr)
	}
}
