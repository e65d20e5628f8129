package engine

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Many anchors with few descriptors: the file cache bounds open segment
// files however many anchors are written.

func TestManyAnchorsFewFiles(t *testing.T) {
	ctx := context.Background()
	anchors := 2000
	if testing.Short() {
		anchors = 500
	}
	const cache = 8
	dir := t.TempDir()
	segRoot := filepath.Join(dir, "db", segment.AnchorsDir)
	// Few descriptors to go round: if the engine held one per anchor, it
	// would run out long before 2,000.
	defer testutil.LowerFDLimit(t, 64)()
	opts := Options{FS: vfs.Default, FileCacheSize: cache, SegmentSize: 8192}
	valueLen := []int{100, 5000} // the second is not kept inline in the index
	db, err := Open(filepath.Join(dir, "db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	// Watch the descriptors the whole time.
	var maxFDs, maxCached atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	cur := atomic.Pointer[DB]{}
	cur.Store(db)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			if n, ok := testutil.OpenSegmentFDs(segRoot); ok && int64(n) > maxFDs.Load() {
				maxFDs.Store(int64(n))
			}
		}
	}()
	// The cache's own count, at quiet moments.
	noteCached := func() {
		st, err := cur.Load().Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if int64(st.OpenFiles) > maxCached.Load() {
			maxCached.Store(int64(st.OpenFiles))
		}
	}
	acks := &ackLog{}
	id := func(i int) string { return fmt.Sprintf("many/%04d", i) }
	for round := 0; round < len(valueLen); round++ {
		for start := 0; start < anchors; start += 100 {
			var es []Entry
			for i := start; i < start+100 && i < anchors; i++ {
				es = append(es, Entry{Anchor: id(i), Type: segment.TypePut, Key: []byte(fmt.Sprintf("k-%d", i)), Value: bytes.Repeat([]byte{'v'}, valueLen[round])})
			}
			rs, err := db.AppendBatch(ctx, es)
			if err != nil {
				t.Fatal(err)
			}
			for j := range rs {
				acks.add(es[j], rs[j])
			}
		}
		noteCached()
		// Reads across every anchor.
		for i := 0; i < anchors; i++ {
			if _, err := db.Record(ctx, id(i), uint64(round+1)); err != nil {
				t.Fatal(err)
			}
			if round == 1 && i%10 == 0 {
				// Not inline: Get reads the segment.
				if v, err := db.Get(ctx, []byte(fmt.Sprintf("k-%d", i))); err != nil || len(v.Value) != valueLen[1] {
					t.Fatalf("get k-%d: %d bytes, %v", i, len(v.Value), err)
				}
			}
		}
		noteCached()
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if db, err = Open(filepath.Join(dir, "db"), opts); err != nil {
			t.Fatal(err)
		}
		cur.Store(db)
	}
	for i := 0; i < anchors; i += 7 {
		n := 0
		for _, err := range db.Log(ctx, id(i), 1, 0) {
			if err != nil {
				t.Fatal(err)
			}
			n++
		}
		if n != len(valueLen) {
			t.Fatalf("anchor %s: %d records", id(i), n)
		}
	}
	checkDB(t, db, acks.snapshot())
	noteCached()
	close(stop)
	wg.Wait()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d anchors: at most %d segment files cached, %d segment descriptors open at once", anchors, maxCached.Load(), maxFDs.Load())
	if maxCached.Load() > cache {
		t.Errorf("the file cache held %d segment files, capacity %d", maxCached.Load(), cache)
	}
	// The cache bound, plus the one file a settle or a seal opens for its
	// fsync and a reader's file in use.
	if maxFDs.Load() > cache+2 {
		t.Errorf("%d segment descriptors were open at once with a file cache of %d", maxFDs.Load(), cache)
	}
}
