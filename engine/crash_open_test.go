package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestCrashDuringCleanOpen crashes at every write of an Open of a cleanly
// closed database. Whatever the crash leaves, the next Open must recover
// every acknowledged record and must not report a stale_index event: that
// event tells an operator an older copy of the index was restored over the
// current one, and a crash inside Open is not that. (It was reported when
// the crash fell between creating the session's journal file and marking
// the index unclean.)
func TestCrashDuringCleanOpen(t *testing.T) {
	for _, pct := range []int{0, 50} {
		mem := vfs.NewCrashableMem()
		db, err := Open("db", crashOptions(mem, false))
		if err != nil {
			t.Fatal(err)
		}
		acks := &ackLog{}
		if err := workload(context.Background(), db, 2, 20, acks); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		acked := acks.snapshot()

		cc := newCloneEveryWrite(mem, pct, uint64(pct), 7)
		db, err = Open("db", crashOptions(errorfs.Wrap(testutil.LockOrdered(mem), cc), false))
		if err != nil {
			t.Fatal(err)
		}
		if !db.RecoveryReport().Clean {
			t.Fatalf("the first reopen after a clean close recovered: %+v", db.RecoveryReport())
		}
		// Open is done; the crash points are its writes only.
		clones := cc.take()
		opened := len(clones)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if opened == 0 {
			t.Fatal("Open wrote nothing: the test crashes nowhere")
		}
		t.Logf("unsynced %d%%: %d crash points during Open", pct, opened)
		for i, fs := range clones[:opened] {
			db, err := Open("db", crashOptions(fs, false))
			if err != nil {
				t.Fatalf("write %d of Open: reopen after a crash: %v", i+1, err)
			}
			for _, ev := range db.RecoveryReport().Events {
				if ev.Kind == EventStaleIndex || ev.Kind == EventDamaged {
					t.Errorf("write %d of Open: a crash during Open was reported as %s: %v", i+1, ev.Kind, ev)
				}
				// With unsynced directory entries surviving at random, the
				// index's marker can outlive its new MANIFEST (index.go,
				// indexUnreadable): then the index is rebuilt.
				if ev.Kind == EventIndexUnreadable && !db.RecoveryReport().Rebuilt {
					t.Errorf("write %d of Open: %v without a rebuild", i+1, ev)
				}
			}
			checkDB(t, db, acked)
			if err := db.Close(); err != nil {
				t.Fatalf("write %d of Open: close: %v", i+1, err)
			}
		}
	}
}

// TestCrashDuringRecovery crashes at every write of the recovery of an
// unclean database, keeping each unsynced block and directory entry with
// probability 0 or 1/2, and recovers again: the second recovery must find
// every acknowledged record, with no damage reported, and the database must
// take writes (checkReopen).
func TestCrashDuringRecovery(t *testing.T) {
	states := uncleanStates(t, 3)
	if len(states) < 3 {
		t.Fatalf("%d unclean states", len(states))
	}
	for si, st := range []crashPoint{states[0], states[len(states)/2], states[len(states)-1]} {
		for _, pct := range []int{0, 50} {
			base := testutil.CrashClone(st.fs, vfs.CrashCloneCfg{})
			cc := newCloneEveryWrite(base, pct, uint64(si), uint64(pct))
			db, err := Open("db", injOptions(errorfs.Wrap(base, cc), false))
			if err != nil {
				t.Fatalf("state %d: recovery: %v", si, err)
			}
			if db.RecoveryReport().Clean {
				t.Fatalf("state %d: an unclean state opened clean", si)
			}
			recovered := cc.take()
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			step := 1
			if testing.Short() {
				step = 3
			}
			t.Logf("state %d (op %d), unsynced %d%%: %d crash points during recovery", si, st.op, pct, len(recovered))
			for i := 0; i < len(recovered); i += step {
				checkReopen(t, fmt.Sprintf("state %d, unsynced %d%%, crash at write %d of recovery", si, pct, i+1), recovered[i], false, st.acked)
			}
		}
	}
}

// cloneEveryWrite is an errorfs.Injector that injects nothing and takes a
// crash clone of mem before every write operation, keeping unsynced data
// with probability pct/100.
type cloneEveryWrite struct {
	mem    *vfs.MemFS
	pct    int
	mu     sync.Mutex
	rng    *rand.Rand
	clones []*vfs.MemFS
}

func newCloneEveryWrite(mem *vfs.MemFS, pct int, seed1, seed2 uint64) *cloneEveryWrite {
	return &cloneEveryWrite{mem: mem, pct: pct, rng: rand.New(rand.NewPCG(seed1, seed2))}
}

func (c *cloneEveryWrite) String() string { return "clone-every-write" }

func (c *cloneEveryWrite) MaybeError(op errorfs.Op) error {
	if op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
		c.mu.Lock()
		c.clones = append(c.clones, testutil.CrashClone(c.mem, vfs.CrashCloneCfg{UnsyncedDataPercent: c.pct, RNG: rand.New(rand.NewPCG(c.rng.Uint64(), c.rng.Uint64()))}))
		c.mu.Unlock()
	}
	return nil
}

// take returns the clones so far and forgets them.
func (c *cloneEveryWrite) take() []*vfs.MemFS {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.clones
	c.clones = nil
	return out
}
