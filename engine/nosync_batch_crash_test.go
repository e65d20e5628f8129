package engine

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestNoSyncBatchAcrossASealIsAtomicAfterAPowerLoss: a NoSync batch whose
// records cross a segment seal. The seal fsyncs the sealed segment, whose
// tail holds the batch's first records, while the batch's journal block
// is not yet synced. A power loss right then must leave the batch whole or
// gone — never its records before the seal alone, adopted from the sealed
// segment by recovery as a tail past the index.
func TestNoSyncBatchAcrossASealIsAtomicAfterAPowerLoss(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	opts := Options{FS: mem, SegmentSize: 4096, SettleBytes: 64 << 20, NoSync: true}
	db, err := Open("db", opts)
	if err != nil {
		t.Fatal(err)
	}
	val := bytes.Repeat([]byte{'v'}, 300)
	for i := range 8 {
		if _, err := db.Put(ctx, "a", []byte(fmt.Sprint("k", i)), val); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Sync(ctx); err != nil { // all of it durable, the journal dropped
		t.Fatal(err)
	}
	info, _, err := db.AnchorInfo(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	before := info.Records
	var batch []Entry
	for i := range 10 {
		batch = append(batch, Entry{Anchor: "a", Type: segment.TypePut, Key: []byte(fmt.Sprint("b", i)), Value: val})
	}
	if _, err := db.AppendBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if info, _, err = db.AnchorInfo(ctx, "a"); err != nil || info.Segments < 2 {
		t.Fatalf("the batch did not cross a seal: %+v %v", info, err)
	}
	// The power fails: only what was synced is on the disk.
	clone := testutil.CrashClone(mem, vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	_ = db.Close()
	opts.FS = clone
	db, err = Open("db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	info, _, err = db.AnchorInfo(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Records - before; got != 0 && got != uint64(len(batch)) {
		t.Fatalf("after the power loss %d of the batch's %d records are there", got, len(batch))
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("verify: %v %+v", err, rep)
	}
}

// TestNoSyncBatchesAreAtomicAtEveryCrash: writers append NoSync batches of
// records over several anchors, across seals and settles, while a crash
// clone is taken before every few writes, with some of the unsynced bytes
// surviving (the kernel's writeback). In every clone each batch is there
// whole or not at all, and the database verifies.
func TestNoSyncBatchesAreAtomicAtEveryCrash(t *testing.T) {
	for seed := uint64(1); seed <= 2; seed++ {
		mem := vfs.NewCrashableMem()
		var mu sync.Mutex
		var clones []*vfs.MemFS
		var ops atomic.Int64
		every := 7
		if testing.Short() {
			every = 29
		}
		rng := rand.New(rand.NewPCG(seed, 3))
		inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
			if op.Kind.ReadOrWrite() != errorfs.OpIsWrite || int(ops.Add(1))%every != 0 {
				return nil
			}
			mu.Lock()
			clones = append(clones, testutil.CrashClone(mem, vfs.CrashCloneCfg{UnsyncedDataPercent: 40, RNG: rand.New(rand.NewPCG(rng.Uint64(), 1))}))
			mu.Unlock()
			return nil
		})
		opts := Options{FS: errorfs.Wrap(testutil.LockOrdered(mem), inj), SegmentSize: 2048, SettleBytes: 16 << 10, NoSync: true}
		db, err := Open("db", opts)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		var wg sync.WaitGroup
		for w := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for b := range 25 {
					var batch []Entry
					n := 2 + (b+w)%5
					for i := range n {
						batch = append(batch, Entry{Anchor: fmt.Sprint("a", (w+i)%4), Type: segment.TypePut,
							Key: []byte(fmt.Sprintf("w%d-b%02d-%d/%d", w, b, i, n)), Value: bytes.Repeat([]byte{'v'}, 100+200*i)})
					}
					if _, err := db.AppendBatch(ctx, batch); err != nil {
						t.Error(err)
						return
					}
					if b%9 == 8 {
						if err := db.Sync(ctx); err != nil {
							t.Error(err)
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("seed %d: %d crash points", seed, len(clones))
		for ci, clone := range clones {
			o := opts
			o.FS = clone
			db, err := Open("db", o)
			if err != nil {
				t.Fatalf("crash point %d: open: %v", ci, err)
			}
			have := map[string]int{} // batch → records there
			want := map[string]int{}
			for v, err := range db.Scan(ctx, nil) {
				if err != nil {
					t.Fatalf("crash point %d: scan: %v", ci, err)
				}
				k := string(v.Key)
				slash := strings.LastIndexByte(k, '/')
				dash := strings.LastIndexByte(k[:slash], '-')
				n, _ := strconv.Atoi(k[slash+1:])
				have[k[:dash]]++
				want[k[:dash]] = n
			}
			for b, n := range have {
				if n != want[b] {
					t.Fatalf("crash point %d: batch %s has %d of its %d records", ci, b, n, want[b])
				}
			}
			if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
				t.Fatalf("crash point %d: verify: %v %+v", ci, err, rep.Failures)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}
