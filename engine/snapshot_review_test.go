package engine

// Regression tests from stop 20's review of snapshots, the retention policy
// and compaction: each failed on the code before its fix.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// A snapshot is durable when CreateSnapshot returns, so the records its
// frontier names must be too: with NoSync appends in the index but not yet
// fsynced in the journal, a power loss after the snapshot was written left
// a snapshot (in the audit log, too) whose frontier the log no longer held,
// and verify failed (INT_003) on a database nobody had touched.
func TestSnapshotOfNoSyncAppendsSurvivesPowerLoss(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	var mu sync.Mutex
	var clones []*vfs.MemFS
	var capture atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if capture.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			mu.Lock()
			clones = append(clones, mem.CrashClone(vfs.CrashCloneCfg{})) // every unsynced byte lost
			mu.Unlock()
		}
		return nil
	})
	opts := Options{SegmentSize: 4096}
	db := mustOpen(t, errorfs.Wrap(mem, inj), opts)
	for i := 0; i < 20; i++ {
		if _, err := db.Put(ctx, "a", []byte(fmt.Sprintf("k%02d", i)), []byte("synced")); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 20; i++ {
		if _, err := db.Put(ctx, "a", []byte(fmt.Sprintf("k%02d", i)), []byte("nosync"), WithNoSync(true)); err != nil {
			t.Fatal(err)
		}
	}
	capture.Store(true)
	info, err := db.CreateSnapshot(ctx, "")
	capture.Store(false)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d crash points; snapshot %s at %v", len(clones), info.Name, info.Frontier)
	for i, c := range clones {
		o := opts
		o.FS = c
		db, err := Open("db", o)
		if err != nil {
			t.Fatalf("crash point %d: open: %v", i, err)
		}
		list, err := db.Snapshots(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list {
			if v, err := db.VerifySnapshot(ctx, s.Path); err != nil {
				t.Fatalf("crash point %d: snapshot %s at %v does not verify: %v (%+v)", i, s.Name, s.Frontier, err, v)
			}
		}
		if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
			t.Fatalf("crash point %d: verify: %v %+v", i, err, rep.Failures)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
