package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

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
