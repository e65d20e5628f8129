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

	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestConcurrentCompactionsPlanOnce: two compactions applied at once act
// as if one ran after the other. Each used to plan before taking the lock
// the apply holds, so both planned the same snapshot and both created it:
// two snapshots of one state and two audit lines where one was due.
func TestConcurrentCompactionsPlanOnce(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t, vfs.NewMem(), Options{})
	defer db.Close()
	policy := snapshot.DefaultPolicy()
	policy.Snapshot.EveryRecords = 1
	policy.KeepSnapshots = 100
	for round := 0; round < 10; round++ {
		for i := 0; i < 20; i++ {
			if _, err := db.Put(ctx, "a", []byte(fmt.Sprint("k", round, "-", i)), []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		created := make([]bool, 2)
		for w := range created {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := db.Compact(ctx, policy, CompactOptions{Apply: true})
				if err != nil {
					t.Error(err)
				}
				created[w] = res.Created != nil
			}()
		}
		wg.Wait()
		if created[0] && created[1] {
			t.Fatalf("round %d: both compactions created a snapshot of the same state", round)
		}
		if !created[0] && !created[1] {
			t.Fatalf("round %d: no compaction created the snapshot due", round)
		}
	}
	list, err := db.Snapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 10 {
		t.Fatalf("%d snapshots after 10 rounds, want 10", len(list))
	}
}

// Compactions that snapshot and truncate while writers append to the same
// anchors and readers read them: every acknowledged write is in the final
// state, every read answers or refuses with a code a caller can act on, and
// the database verifies.
func TestCompactRacingAppendsAndReads(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{SegmentSize: 4096, InlineValueMax: 64})
	defer db.Close()
	const writers = 3
	want := make([]map[string]string, writers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failed atomic.Value
	fail := func(err error) { failed.CompareAndSwap(nil, err) }
	for w := 0; w < writers; w++ {
		want[w] = map[string]string{}
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			anchor := fmt.Sprintf("a%d", w)
			for i := 0; i < 1500; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("w%d-k%02d", w, i%40)
				v := fmt.Sprintf("v%d-%s", i, strings.Repeat("x", i%3*40))
				var err error
				if i%13 == 7 {
					_, err = db.Delete(ctx, anchor, []byte(k))
					delete(want[w], k)
				} else {
					_, err = db.Put(ctx, anchor, []byte(k), []byte(v))
					want[w][k] = v
				}
				if err != nil {
					fail(fmt.Errorf("append: %w", err))
					return
				}
			}
		}(w)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := []byte(fmt.Sprintf("w%d-k%02d", i%writers, i%40))
			if _, err := db.Get(ctx, k); err != nil && !errors.Is(err, ErrNotFound) {
				fail(fmt.Errorf("get %s: %w", k, err))
			}
			for _, err := range db.History(ctx, k) {
				if err != nil {
					fail(fmt.Errorf("history %s: %w", k, err))
					break
				}
			}
			for _, err := range db.Scan(ctx, []byte(fmt.Sprintf("w%d-", i%writers))) {
				if err != nil {
					fail(fmt.Errorf("scan: %w", err))
					break
				}
			}
		}
	}()
	removed := int64(0)
	for round := 0; round < 6 && failed.Load() == nil; round++ {
		time.Sleep(50 * time.Millisecond)
		res, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true})
		if err != nil {
			fail(fmt.Errorf("compact round %d: %w", round, err))
			break
		}
		removed += res.RemovedBytes
	}
	close(stop)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	if removed == 0 {
		t.Fatal("no compaction truncated anything")
	}
	all := map[string]string{}
	for _, m := range want {
		for k, v := range m {
			all[k] = v
		}
	}
	checkState(t, db, all)
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("verify: %v %+v", err, rep.Failures)
	}
}
