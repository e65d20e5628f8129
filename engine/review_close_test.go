package engine

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestReviewDuplicateRacingClose: an append racing Close is refused with
// IO_001 "database is closed" or completes (DESIGN.md §2: Close drains what
// was admitted); a retry of a committed append, which the duplicate fast
// path answers from the index, must not read the index after Close closed
// it (Pebble panics on a closed DB).
func TestReviewDuplicateRacingClose(t *testing.T) {
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
