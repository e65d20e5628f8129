package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

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

		var mu sync.Mutex
		var clones []*vfs.MemFS
		rng := rand.New(rand.NewPCG(uint64(pct), 7))
		inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
			if op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
				mu.Lock()
				clones = append(clones, mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))}))
				mu.Unlock()
			}
			return nil
		})
		db, err = Open("db", crashOptions(errorfs.Wrap(mem, inj), false))
		if err != nil {
			t.Fatal(err)
		}
		if !db.RecoveryReport().Clean {
			t.Fatalf("the first reopen after a clean close recovered: %+v", db.RecoveryReport())
		}
		// Open is done; the crash points are its writes only.
		mu.Lock()
		opened := len(clones)
		mu.Unlock()
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
			base := st.fs.CrashClone(vfs.CrashCloneCfg{})
			var mu sync.Mutex
			var clones []*vfs.MemFS
			rng := rand.New(rand.NewPCG(uint64(si), uint64(pct)))
			inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
				if op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
					mu.Lock()
					clones = append(clones, base.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))}))
					mu.Unlock()
				}
				return nil
			})
			db, err := Open("db", injOptions(errorfs.Wrap(base, inj), false))
			if err != nil {
				t.Fatalf("state %d: recovery: %v", si, err)
			}
			if db.RecoveryReport().Clean {
				t.Fatalf("state %d: an unclean state opened clean", si)
			}
			mu.Lock()
			recovered := clones
			clones = nil
			mu.Unlock()
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
