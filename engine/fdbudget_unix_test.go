//go:build unix

package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// No resource cliff: the descriptor budget and descriptor pressure.

// TestDescriptorBudget: the defaults are cut from the descriptor limit,
// and under any limit the cache, the index's share and a reserve fit in it
// (from 64 descriptors up; below that only the floors remain).
func TestDescriptorBudget(t *testing.T) {
	for _, c := range []struct {
		limit          uint64
		segments, idx  int
		fitsUnderLimit bool
	}{
		{0, 256, 0, false},
		{64, 4, 74, false},
		{256, 134, 74, true},
		{1024, 672, 224, true},
		{4096, 1024, 896, true},
		{1 << 20, 1024, 1000, true},
	} {
		s, i := fdBudget(c.limit)
		if s != c.segments || i != c.idx {
			t.Errorf("limit %d: cache %d, index %d; want %d, %d", c.limit, s, i, c.segments, c.idx)
		}
		if c.fitsUnderLimit && uint64(s+i+fdReserveMin) > c.limit {
			t.Errorf("limit %d: %d + %d + a reserve of %d do not fit", c.limit, s, i, fdReserveMin)
		}
	}
}

const fdChildEnv = "ANCHORDB_TEST_FD_CHILD"

// fdLimitForTest is the descriptor limit the child runs under.
const fdLimitForTest = 256

// TestManyAnchorsUnderDescriptorLimit: under a limit of 256 descriptors
// (the soft limit, lowered in a child process), records go onto 100,000
// anchors (10,000 with -short, 5,000 in the race pass), batch after batch,
// and read back, with
// every default: the segment cache, the index's tables and the journal
// share the budget, and nothing fails for want of a descriptor. Before the
// budget the cache alone took 256 descriptors, and the first open that
// failed stopped every write (IO_001).
func TestManyAnchorsUnderDescriptorLimit(t *testing.T) {
	if spec := os.Getenv(fdChildEnv); spec != "" {
		manyAnchorsChild(t, spec)
		return
	}
	if _, ok := testutil.OpenFDs(); !ok {
		t.Skip("counting descriptors needs /proc/self/fd")
	}
	anchors := 100_000
	if testing.Short() {
		anchors = 10_000
		if testutil.RaceEnabled {
			anchors = 5_000
		}
	}
	dir := filepath.Join(memDir(t), "db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestManyAnchorsUnderDescriptorLimit$", "-test.v")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d", fdChildEnv, dir, anchors))
	began := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("the child under %d descriptors: %v\n%s", fdLimitForTest, err, clip(string(out), 60))
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "child:") {
			t.Log(strings.TrimSpace(line))
		}
	}
	t.Logf("%d anchors under %d descriptors in %v", anchors, fdLimitForTest, time.Since(began).Round(time.Millisecond))
	// Without the limit, everything is there.
	db, err := Open(dir, Options{FS: vfs.Default})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n, records uint64
	for info, err := range db.Anchors(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		records += info.Records
	}
	if n != uint64(anchors) || records != uint64(2*anchors) {
		t.Fatalf("%d anchors, %d records; want %d, %d", n, records, anchors, 2*anchors)
	}
}

// memDir is a temporary directory in memory (/dev/shm) when there is one:
// the test is about descriptors, and 200,000 fsyncs of files and
// directories on a disk would take minutes of it.
func memDir(t testing.TB) string {
	t.Helper()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "anchordb-test-"); err == nil {
			t.Cleanup(func() { _ = os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}

func manyAnchorsChild(t *testing.T, spec string) {
	ctx := context.Background()
	dir, n, _ := strings.Cut(spec, ",")
	anchors, err := strconv.Atoi(n)
	if err != nil {
		t.Fatal(err)
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = fdLimitForTest
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	db, err := Open(dir, Options{FS: vfs.Default})
	if err != nil {
		t.Fatal(err)
	}
	wantCache, wantIndex := fdBudget(fdLimitForTest)
	if o := db.Options(); o.FileCacheSize != wantCache || o.indexFiles != wantIndex {
		t.Fatalf("under %d descriptors: cache %d, index %d", fdLimitForTest, o.FileCacheSize, o.indexFiles)
	}
	id := func(i int) string { return fmt.Sprintf("dev/%06d", i) }
	var maxFDs atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // the descriptors open, all along (settles and closes too)
		defer close(sampled)
		for {
			if n, ok := testutil.OpenFDs(); ok && int64(n) > maxFDs.Load() {
				maxFDs.Store(int64(n))
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	began := time.Now()
	for round := 0; round < 2; round++ {
		for start := 0; start < anchors; start += 1000 {
			var es []Entry
			for i := start; i < min(start+1000, anchors); i++ {
				es = append(es, Entry{Anchor: id(i), Type: segment.TypePut, Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprint(round))})
			}
			if _, err := db.AppendBatch(ctx, es); err != nil {
				t.Fatalf("round %d, anchors %d..: %v", round, start, err)
			}
		}
		// Reads that open the segments of many anchors, beside the writes.
		for i := 0; i < anchors; i += 97 {
			if _, err := db.Record(ctx, id(i), uint64(round+1)); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("child: round %d appended and read at %v", round, time.Since(began).Round(time.Millisecond))
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("child: round %d closed at %v", round, time.Since(began).Round(time.Millisecond))
		if db, err = Open(dir, Options{FS: vfs.Default}); err != nil {
			t.Fatal(err)
		}
	}
	m := db.Metrics()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	<-sampled
	t.Logf("child: at most %d descriptors open (limit %d; cache %d, index %d); %d waits for one", maxFDs.Load(), fdLimitForTest, wantCache, wantIndex, m.DescriptorWaits)
}

// occupyFDs opens /dev/null until the process has no descriptor left, and
// returns the function that closes them all again.
func occupyFDs(t *testing.T) func() {
	t.Helper()
	var held []*os.File
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatal(err)
			}
			break
		}
		held = append(held, f)
		if len(held) > 1<<16 {
			t.Fatal("the descriptor limit was not lowered")
		}
	}
	return func() {
		for _, f := range held {
			_ = f.Close()
		}
	}
}

// TestDescriptorPressureRefusesAppendsAndRecovers: with every descriptor
// of the process taken, a segment write waits for one instead of stopping
// the database; meanwhile appends are refused at once with CAP_001 and a
// RetryAfter, nothing is lost, and once descriptors are free again the
// write completes and appends are taken. Before, the failed open stopped
// every write (IO_001) until the database was reopened.
func TestDescriptorPressureRefusesAppendsAndRecovers(t *testing.T) {
	if _, ok := testutil.OpenFDs(); !ok {
		t.Skip("counting descriptors needs /proc/self/fd")
	}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "db")
	defer testutil.LowerFDLimit(t, 64)()
	db, err := Open(dir, Options{FS: vfs.Default, FileCacheSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	release := occupyFDs(t)
	defer func() {
		if release != nil {
			release()
		}
	}()
	// Acknowledged: the journal needs no new descriptor.
	r, err := db.Put(ctx, "new-anchor", []byte("k2"), []byte("v2"))
	if err != nil {
		t.Fatalf("an append under pressure before any segment write: %v", err)
	}
	// A read of it needs its segment written: the write waits.
	read := make(chan error, 1)
	go func() {
		_, err := db.Record(ctx, "new-anchor", r.Seq)
		read <- err
	}()
	testutil.WaitFor(t, "the segment write to wait for a descriptor", func() bool { return db.fdPressure.Load() != 0 })
	_, err = db.Put(ctx, "other", []byte("k3"), []byte("v3"))
	var ref *errs.RefusalError
	if !errors.As(err, &ref) || ref.Code != errs.CodeCapacityExhausted || ref.RetryAfter <= 0 {
		t.Fatalf("an append while a write waits for a descriptor: %v, want CAP_001 with RetryAfter", err)
	}
	release()
	release = nil
	if err := <-read; err != nil {
		t.Fatalf("the read once descriptors were free: %v", err)
	}
	time.Sleep(ref.RetryAfter)
	if _, err := db.Put(ctx, "other", []byte("k3"), []byte("v3")); err != nil {
		t.Fatalf("the retry after RetryAfter: %v", err)
	}
	if db.Metrics().DescriptorWaits == 0 {
		t.Error("no wait for a descriptor was counted")
	}
	if err := db.Sync(ctx); err != nil {
		t.Fatalf("writes stopped: %v", err)
	}
}

// TestDescriptorPressureOnReadIsRetryable: a read that finds no descriptor
// free is refused with CAP_001 and a RetryAfter, not an I/O failure.
func TestDescriptorPressureOnReadIsRetryable(t *testing.T) {
	if _, ok := testutil.OpenFDs(); !ok {
		t.Skip("counting descriptors needs /proc/self/fd")
	}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "db")
	db, err := Open(dir, Options{FS: vfs.Default, SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		if _, err := db.Put(ctx, "a", []byte(fmt.Sprint(i)), []byte("a value long enough to leave the index"+strings.Repeat("x", 5000))); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	defer testutil.LowerFDLimit(t, 64)()
	ro, err := Open(dir, Options{FS: vfs.Default, ReadOnly: true, FileCacheSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	release := occupyFDs(t)
	_, err = ro.Record(ctx, "a", 1)
	release()
	var ref *errs.RefusalError
	if !errors.As(err, &ref) || ref.Code != errs.CodeCapacityExhausted || ref.RetryAfter <= 0 {
		t.Fatalf("a read with no descriptor free: %v, want CAP_001 with RetryAfter", err)
	}
	if _, err := ro.Record(ctx, "a", 1); err != nil {
		t.Fatalf("the read again: %v", err)
	}
}
