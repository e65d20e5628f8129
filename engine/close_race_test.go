package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestCloseRacingReadsAndOperations: Close while other goroutines read,
// verify, snapshot, compact, settle and ingest. Each may succeed or be
// refused with IO_001 ("database is closed"), but none may panic or hang:
// reads used to pass the closed check and then read the index Close had
// just closed, and Pebble panics on that ("pebble: closed"), ending the
// process; a settle that Close stopped the applier under would wait for
// ever. Close now waits for reads in progress, and for operations that go
// through group commit as it waits for appends.
func TestCloseRacingReadsAndOperations(t *testing.T) {
	ctx := context.Background()
	rounds := 60
	if testing.Short() {
		rounds = 15
	}
	fs := vfs.NewMem()
	src, err := Open("src", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := src.Put(ctx, "far", []byte(fmt.Sprint("f", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	ops := map[string]func(db *DB) error{
		"get": func(db *DB) error { _, err := db.Get(ctx, []byte("3")); return notFoundIsNil(err) },
		"scan": func(db *DB) error {
			for _, err := range db.Scan(ctx, nil) {
				if err != nil {
					return err
				}
			}
			return nil
		},
		"log": func(db *DB) error {
			for _, err := range db.Log(ctx, "a", 1, 0) {
				if err != nil {
					return err
				}
			}
			return nil
		},
		"merged": func(db *DB) error {
			for _, err := range db.Merged(ctx, MergedOptions{}) {
				if err != nil {
					return err
				}
			}
			return nil
		},
		"record":   func(db *DB) error { _, err := db.Record(ctx, "a", 1); return err },
		"stats":    func(db *DB) error { _, err := db.Stats(ctx); return err },
		"prove":    func(db *DB) error { _, err := db.ProveInclusion(ctx, "a", 1, 0); return err },
		"verify":   func(db *DB) error { _, err := db.Verify(ctx, VerifyOptions{}); return err },
		"snapshot": func(db *DB) error { _, err := db.CreateSnapshot(ctx, ""); return err },
		"sync":     func(db *DB) error { return db.Sync(context.Background()) },
		"compact": func(db *DB) error {
			_, err := db.Compact(ctx, snapshot.DefaultPolicy(), CompactOptions{Apply: true})
			return err
		},
		"ingest": func(db *DB) error { _, err := db.Ingest(ctx, "src", IngestOptions{}); return err },
	}
	for round := 0; round < rounds; round++ {
		dir := fmt.Sprint("db", round)
		db, err := Open(dir, Options{FS: fs, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 20; i++ {
			if _, err := db.Put(ctx, "a", []byte(fmt.Sprint(i)), []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		failures := make(chan string, len(ops)*2)
		for name, op := range ops {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() {
					if r := recover(); r != nil {
						failures <- fmt.Sprintf("%s panicked: %v", name, r)
					}
				}()
				for i := 0; i < 3; i++ {
					if err := op(db); err != nil && !errors.Is(err, ErrWriteFailed) && !errors.Is(err, ErrScopeLocked) {
						failures <- fmt.Sprintf("%s: %v", name, err)
						return
					}
				}
			}()
		}
		closed := make(chan error, 1)
		go func() { closed <- db.Close() }()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: an operation racing Close hangs", round)
		}
		select {
		case err := <-closed:
			if err != nil {
				t.Fatalf("round %d: close: %v", round, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: Close hangs", round)
		}
		close(failures)
		for f := range failures {
			t.Fatalf("round %d: %s", round, f)
		}
	}
}

func notFoundIsNil(err error) error {
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// An ingest reads our index while it checks the arriving logs (our heads,
// the rows it must agree with, the idempotency keys the arrivals must not
// reuse) before it appends anything. Close, which a caller may run from
// another goroutine (a signal handler), closes the index once admission is
// drained, and nothing of the ingest is admitted then. The ingest must fail
// with IO_001 "database is closed" (as an append racing Close does,
// TestDuplicateRacingClose), not read a closed Pebble, which panics
// ("pebble: closed") and takes the process with it.
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
	dst.commit.env.beforeApply = func() {
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

// CreateCheckpoint racing Close: it checks that the database is open, then
// reads the index (the anchors, the trees) and, since it signs only durable
// records, settles (Sync). Close closes the index once nothing it waits for
// is in flight, so a CreateCheckpoint past the check must be among what it
// waits for: otherwise it reads the closed index, and Pebble panics
// ("pebble: closed"), taking the process down instead of answering IO_001
// "database is closed" (or signing). Here it waits on db.checkpointMu, which
// the test holds, while Close runs.
func TestCheckpointRacingClose(t *testing.T) {
	ctx := context.Background()
	skey, _ := coverKeys(t)
	fs := vfs.NewMem()
	db, err := Open("db", Options{FS: fs, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	db.checkpointMu.Lock()
	done := make(chan string, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Sprint("panic: ", r)
			}
		}()
		_, _, err := db.CreateCheckpoint(ctx, skey)
		if err != nil && !errors.Is(err, ErrWriteFailed) {
			done <- fmt.Sprint("error: ", err)
			return
		}
		done <- ""
	}()
	time.Sleep(50 * time.Millisecond) // it waits on db.checkpointMu
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	select {
	case err := <-closed:
		closed <- err
	case <-time.After(200 * time.Millisecond): // Close waits for it
	}
	db.checkpointMu.Unlock()
	if s := <-done; s != "" {
		t.Fatalf("CreateCheckpoint racing Close: %s", s)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

// VerifyAuditLog reads the audit head row from the index, so it passes
// Close's gates like every other read: a call racing Close (or made after
// it) is refused with IO_001 "database is closed", and never reads the
// closed Pebble, which panics ("pebble: closed") and takes the process down.
func TestVerifyAuditLogAfterClose(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t, vfs.NewMem(), Options{})
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateSnapshot(ctx, ""); err != nil { // one audit line
		t.Fatal(err)
	}
	if _, err := db.VerifyAuditLog(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("VerifyAuditLog after Close panicked: %v", r)
		}
	}()
	if _, err := db.VerifyAuditLog(ctx); !isClosedErr(err) {
		t.Fatalf("VerifyAuditLog after Close: %v; want IO_001 database is closed", err)
	}
}

// An append racing Close is refused with IO_001 "database is closed" or
// completes (DESIGN.md §2: Close drains what was admitted); a retry of a
// committed append, which the duplicate fast path answers from the index,
// must not read the index after Close closed it (Pebble panics on a closed
// DB).
func TestDuplicateRacingClose(t *testing.T) {
	ctx := context.Background()
	for round := 0; round < 10; round++ {
		db := mustOpen(t, vfs.NewMem(), Options{})
		e := Entry{Anchor: "a", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v"), IdempotencyKey: []byte("op-1")}
		if _, err := db.Append(ctx, e); err != nil {
			t.Fatal(err)
		}
		var wg, running sync.WaitGroup
		start := make(chan struct{})
		for i := 0; i < 16; i++ {
			wg.Add(1)
			running.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for n := 0; ; n++ {
					if n == 10 {
						running.Done()
					}
					r, err := db.Append(ctx, e)
					if err != nil {
						if !errors.Is(err, ErrWriteFailed) {
							t.Errorf("append racing Close: %v", err)
						}
						if n < 10 {
							running.Done()
						}
						return
					}
					if !r.Duplicate {
						t.Errorf("retry appended: %+v", r)
						return
					}
				}
			}()
		}
		close(start)
		running.Wait()
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
	}
}
