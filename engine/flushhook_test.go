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
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// A NoSync database's index flush first fsyncs the journal, so no index row
// becomes durable before its record. When that fsync fails, the flush must
// not go on: the index would become durable ahead of the journal, and after
// a power loss vouch for records that exist nowhere (damage). Pebble cannot
// be told not to flush, so the failure takes Pebble's fatal path and ends
// the process. The test runs in a child process; the parent reopens what a
// restart and a power loss at that moment would find and requires both to
// recover without damage.
func TestFailedJournalSyncBeforeIndexFlush(t *testing.T) {
	if childLoop(t, flushHookLoop) {
		return
	}
	superviseLoop(t, "TestFailedJournalSyncBeforeIndexFlush", "flushhook", 0, 1)
}

func flushHookLoop(t *testing.T, id string) loopFunc {
	return func(t *testing.T, i int) bool {
		if i > 0 {
			return true
		}
		ctx := context.Background()
		mem := vfs.NewCrashableMem()
		var armed atomic.Bool
		inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
			if armed.Load() && op.Kind == errorfs.OpFileSyncData && strings.Contains(op.Path, JournalDir) {
				return errors.New("injected: journal fdatasync failed")
			}
			return nil
		})
		ffs := newFaultFS(mem, inj, faultPlain)
		acks := &ackLog{}
		db, err := Open("db", Options{FS: ffs, NoSync: true, SettleInterval: time.Hour, SettleBytes: 1 << 30,
			fatalHook: fatalSaver(ffs, acks, true, 1)})
		if err != nil {
			t.Fatal(err)
		}
		put := func(key string) {
			e := Entry{Anchor: "a", Type: segment.TypePut, Key: []byte(key), Value: []byte("v")}
			r, err := db.Append(ctx, e)
			if err != nil {
				t.Fatal(err)
			}
			acks.add(e, r)
		}
		for i := 0; i < 3; i++ {
			put(fmt.Sprint("s", i))
		}
		if err := db.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			put(fmt.Sprint("n", i))
		}
		armed.Store(true)
		// A compaction with nothing to do still flushes the index.
		_, cerr := db.Compact(ctx, snapshot.DefaultPolicy(), CompactOptions{Apply: true})
		t.Fatalf("the index flush after a failed journal fdatasync went on (compact: %v)", cerr)
		return true
	}
}
