package engine

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// crashPoint is the state of the filesystem after a simulated power loss at
// some moment of a workload, with the appends acknowledged before it.
type crashPoint struct {
	op    int64
	fs    *vfs.MemFS
	acked []ackedEntry
}

// crashOptions are small enough that a short workload seals segments and
// settles many times.
func crashOptions(fs vfs.FS, noSync bool) Options {
	return Options{FS: fs, SegmentSize: 1024, SettleBytes: 3000, NoSync: noSync}
}

// runCrashWorkload runs the workload on a crashable MemFS and takes a crash
// clone before every every-th write operation of the segments and the index
// alike (they share the filesystem, so one clone captures both at the same
// instant).
func runCrashWorkload(t *testing.T, writers, perWriter, every int, pct int, noSync bool, seed uint64) []crashPoint {
	mem := vfs.NewCrashableMem()
	acks := &ackLog{}
	var points []crashPoint
	var mu sync.Mutex
	var ops atomic.Int64
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var rngMu sync.Mutex
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind.ReadOrWrite() != errorfs.OpIsWrite {
			return nil
		}
		n := ops.Add(1)
		if int(n)%every != 0 {
			return nil
		}
		acked := acks.snapshot()
		rngMu.Lock()
		clone := testutil.CrashClone(mem, vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))})
		rngMu.Unlock()
		mu.Lock()
		points = append(points, crashPoint{op: n, fs: clone, acked: acked})
		mu.Unlock()
		return nil
	})
	fs := errorfs.Wrap(testutil.LockOrdered(mem), inj)
	db, err := Open("db", crashOptions(fs, noSync))
	if err != nil {
		t.Fatal(err)
	}
	if err := workload(context.Background(), db, writers, perWriter, acks); err != nil {
		t.Fatalf("workload: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The final state, after a clean close, is a crash point too.
	points = append(points, crashPoint{op: ops.Load() + 1, fs: testutil.CrashClone(mem, vfs.CrashCloneCfg{}), acked: acks.snapshot()})
	return points
}

// checkCrashPoint reopens a crash clone and checks every invariant, then
// writes more and reopens again: recovery must leave a database that works.
func checkCrashPoint(t *testing.T, p crashPoint, noSync bool) {
	t.Helper()
	db, err := Open("db", crashOptions(p.fs, noSync))
	if err != nil {
		t.Fatalf("op %d: open after crash: %v", p.op, err)
	}
	acked := p.acked
	if noSync {
		// Without sync, a power loss may take acknowledged appends: only the
		// consistency of what survived is promised.
		acked = nil
	}
	checkDB(t, db, acked)
	if rep, err := db.Verify(context.Background(), VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("op %d: verify after crash: %v %+v", p.op, err, rep.Failures)
	}
	for _, ev := range db.RecoveryReport().Events {
		if ev.Kind == EventDamaged {
			t.Fatalf("op %d: recovery found damage after a crash: %v", p.op, ev)
		}
	}
	more := &ackLog{}
	if err := workload(context.Background(), db, 2, 3, more); err != nil {
		t.Fatalf("op %d: append after recovery: %v", p.op, err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("op %d: close: %v", p.op, err)
	}
	db, err = Open("db", crashOptions(p.fs, noSync))
	if err != nil {
		t.Fatalf("op %d: second open: %v", p.op, err)
	}
	defer db.Close()
	checkDB(t, db, append(acked, more.snapshot()...))
}

func TestCrashAtEveryWriteSync(t *testing.T) {
	// One writer makes the operation sequence deterministic: every write of
	// the workload is a crash point.
	points := runCrashWorkload(t, 1, 60, testutil.RaceStride(6), 0, false, 1)
	t.Logf("%d crash points", len(points))
	for _, p := range points {
		checkCrashPoint(t, p, false)
	}
}

func TestCrashConcurrentWithUnsyncedData(t *testing.T) {
	// Concurrent writers, and each unsynced 4 KiB block or directory entry
	// survives the crash with probability 50%: torn and reordered writes.
	for seed := uint64(1); seed <= 3; seed++ {
		every := 3
		if testing.Short() {
			every = 15
		}
		points := runCrashWorkload(t, 4, 20, every, 50, false, seed)
		t.Logf("seed %d: %d crash points", seed, len(points))
		for _, p := range points {
			checkCrashPoint(t, p, false)
		}
	}
}

func TestCrashNoSync(t *testing.T) {
	points := runCrashWorkload(t, 2, 25, 2, 30, true, 7)
	t.Logf("%d crash points", len(points))
	for _, p := range points {
		checkCrashPoint(t, p, true)
	}
}
