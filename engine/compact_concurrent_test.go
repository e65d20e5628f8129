package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"

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
