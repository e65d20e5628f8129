package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestRebuildFromSnapshotMatchesFullReplay(t *testing.T) {
	ctx := context.Background()
	for _, truncate := range []bool{false, true} {
		t.Run(fmt.Sprintf("truncate=%v", truncate), func(t *testing.T) {
			fs := vfs.NewMem()
			db, want := compactFixture(t, fs)
			if truncate {
				for i := 0; i < 2; i++ {
					if _, err := db.Compact(ctx, truncatePolicy, CompactOptions{Apply: true}); err != nil {
						t.Fatal(err)
					}
					_, _ = db.Put(ctx, "a0", []byte(fmt.Sprintf("x%d", i)), []byte("between"))
					want[fmt.Sprintf("x%d", i)] = "between"
				}
			} else if _, err := db.CreateSnapshot(ctx, ""); err != nil {
				t.Fatal(err)
			}
			// A tail after the snapshot, with a delete and idempotency keys.
			for i := 0; i < 40; i++ {
				k := fmt.Sprintf("k%03d", i%60)
				if i%9 == 0 {
					if _, err := db.Delete(ctx, "a1", []byte(k)); err != nil {
						t.Fatal(err)
					}
					delete(want, k)
					continue
				}
				e := Entry{Anchor: fmt.Sprintf("a%d", i%4), Type: "put", Key: []byte(k), Value: []byte(fmt.Sprint("tail", i)),
					IdempotencyKey: []byte(fmt.Sprint("t", i))}
				if _, err := db.Append(ctx, e); err != nil {
					t.Fatal(err)
				}
				want[k] = fmt.Sprint("tail", i)
			}
			rootBefore, n, err := db.MergedRoot(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			heads := map[string]AnchorInfo{}
			for info, err := range db.Anchors(ctx) {
				if err != nil {
					t.Fatal(err)
				}
				heads[info.ID] = info
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			opts := Options{FS: fs, SegmentSize: 4096, InlineValueMax: 64}
			plan, err := RebuildIndexWith(ctx, "db", opts, RebuildOptions{Apply: true, FromSnapshot: true})
			if err != nil {
				t.Fatal(err)
			}
			fast := true
			for _, ev := range plan.Report.Events {
				if ev.Kind == EventFastRebuildAbandoned || ev.Kind == EventDamaged {
					fast = false
					t.Logf("event: %v", ev)
				}
			}
			if !fast {
				t.Fatal("the fast path was abandoned on a clean database")
			}
			db, err = Open("db", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			checkState(t, db, want)
			rootAfter, n2, err := db.MergedRoot(ctx, nil)
			if err != nil || rootAfter != rootBefore || n2 != n {
				t.Fatalf("merged root after the rebuild differs: %v (%d vs %d)", err, n2, n)
			}
			for info, err := range db.Anchors(ctx) {
				if err != nil {
					t.Fatal(err)
				}
				if h := heads[info.ID]; h.Records != info.Records || h.HeadHash != info.HeadHash || h.LastCounter != info.LastCounter || h.Segments != info.Segments {
					t.Fatalf("anchor %s: before %+v, after %+v", info.ID, h, info)
				}
			}
			// Idempotency keys survive; writes continue the chains.
			r, err := db.Append(ctx, Entry{Anchor: "a1", Type: "put", Key: []byte("k001"), Value: []byte("tail1"), IdempotencyKey: []byte("t1")})
			if err != nil || !r.Duplicate {
				t.Fatalf("idempotent retry after the rebuild: %+v %v", r, err)
			}
			if _, err := db.Put(ctx, "a2", []byte("new"), []byte("x")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestRebuildFromSnapshotFallsBack(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, want := compactFixture(t, fs)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// No snapshot: a full replay does it.
	plan, err := RebuildIndexWith(ctx, "db", Options{FS: fs, SegmentSize: 4096, InlineValueMax: 64}, RebuildOptions{Apply: true, FromSnapshot: true})
	if err != nil {
		t.Fatal(err)
	}
	abandoned := false
	for _, ev := range plan.Report.Events {
		abandoned = abandoned || ev.Kind == EventFastRebuildAbandoned
	}
	if !abandoned {
		t.Fatalf("no snapshot, yet the fast path ran: %+v", plan.Report)
	}
	db, err = Open("db", Options{FS: fs, SegmentSize: 4096, InlineValueMax: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	checkState(t, db, want)
}
