package engine

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// waitFor is testutil.WaitFor: a hang detector, not a timing assertion.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, what, cond)
}

// Anchors (and Frontier, Stats, Merged's frontier check, Ingest) look up
// each anchor after one wait for visibility under the caller's context: a
// cancelled context ends a wait for an append acknowledged meanwhile.
// (They used to call AnchorInfo per anchor, which waits without one.)
func TestAnchorsHonoursContextWhileWaiting(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t, vfs.NewMem(), Options{})
	h := holdApplier(db)
	defer func() { h.release(); _ = db.Close() }()
	for _, a := range []string{"a", "b", "c"} {
		if _, err := db.Put(ctx, a, []byte("k"+a), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		n := 0
		for _, err := range db.Anchors(cctx) {
			if err != nil {
				done <- err
				return
			}
			n++
			if n == 1 {
				// Another writer's append is acknowledged while the applier
				// is slow; then the caller gives up.
				h.hold()
				if _, err := db.Put(ctx, "z", []byte("kz"), []byte("v")); err != nil {
					done <- err
					return
				}
				time.AfterFunc(50*time.Millisecond, cancel)
			}
		}
		done <- nil
	}()
	// It either finishes the listing it began (the new anchor's append came
	// after it) or stops for the cancelled context; it must not wait on.
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Anchors: %v, want nil or context.Canceled", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Anchors still blocked 3s after its context was cancelled: it waits for the applier without the caller's context")
	}
}

// VerifySnapshot reads the index (schema.Location, firstPresent): it must first
// wait for the appends acknowledged before it, or a snapshot whose frontier
// includes one is refused as INT_003 until the applier catches up.
func TestVerifySnapshotWaitsForApplier(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	t0 := time.Unix(1_700_000_000, 0)
	entries := []Entry{
		{Anchor: "a", Type: segment.TypePut, Key: []byte("k1"), Value: []byte("v1"), Counter: 1, Time: t0},
		{Anchor: "a", Type: segment.TypePut, Key: []byte("k2"), Value: []byte("v2"), Counter: 2, Time: t0.Add(time.Second)},
	}
	src, err := Open("src", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, err := src.Append(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	info, err := src.CreateSnapshot(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}

	dst, err := Open("dst", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	h := holdApplier(dst)
	defer func() { h.release(); _ = dst.Close() }()
	if _, err := dst.Append(ctx, entries[0]); err != nil {
		t.Fatal(err)
	}
	h.hold()
	r, err := dst.Append(ctx, entries[1]) // acknowledged, not applied
	if err != nil {
		t.Fatal(err)
	}
	if r.Hash != info.Frontier["a"].Hash {
		t.Fatalf("records differ: %s vs %s", r.Hash, info.Frontier["a"].Hash)
	}
	res := make(chan error, 1)
	go func() {
		_, err := dst.VerifySnapshot(ctx, info.Path)
		res <- err
	}()
	select {
	case err := <-res:
		h.release()
		if err := dst.commit.awaitVisible(ctx); err != nil {
			t.Fatal(err)
		}
		_, err2 := dst.VerifySnapshot(ctx, info.Path)
		t.Fatalf("VerifySnapshot after the Append returned, applier held: %v (code %s); after the apply: %v", err, errs.CodeOf(err), err2)
	case <-time.After(200 * time.Millisecond):
		// It waited (the fixed behaviour).
		h.release()
		if err := <-res; err != nil {
			t.Fatal(err)
		}
	}
}

// An acknowledged append whose apply never happened (the applier is held
// through a failure and Close) is replayed from the journal at the next open.
func TestAckedUnappliedSurvivesFailedClose(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	db := mustOpen(t, mem, Options{})
	h := holdApplier(db)
	h.hold()
	r, err := db.Put(ctx, "a", []byte("k"), []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	_ = db.fail(errors.New("injected: index apply failed"))
	// A reader waiting for the held group returns the failure, not a hang.
	if _, err := db.Get(ctx, []byte("k")); !errors.Is(err, ErrWriteFailed) {
		t.Fatalf("Get: %v, want IO_001", err)
	}
	h.release()
	_ = db.Close()
	db2 := mustOpen(t, mem, Options{})
	defer db2.Close()
	v, err := db2.Get(ctx, []byte("k"))
	if err != nil || v.Hash != r.Hash {
		t.Fatalf("after reopen: %+v, %v", v, err)
	}
}

// Close with acknowledged, unapplied groups (not failed) applies them first.
func TestCloseAppliesAckedBacklog(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	db := mustOpen(t, mem, Options{})
	h := holdApplier(db)
	h.hold()
	var rs []Receipt
	for i := 0; i < 5; i++ {
		r, err := db.Put(ctx, "a", []byte{'k', byte('0' + i)}, []byte("v"))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	time.Sleep(50 * time.Millisecond)
	h.release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	db2 := mustOpen(t, mem, Options{})
	defer db2.Close()
	if !db2.RecoveryReport().Clean {
		t.Fatal("not clean")
	}
	for i, r := range rs {
		v, err := db2.Get(ctx, []byte{'k', byte('0' + i)})
		if err != nil || v.Hash != r.Hash {
			t.Fatalf("k%d after reopen: %v", i, err)
		}
	}
}

// A journal fsync fails (and, as on Linux, loses the dirty pages: the next
// fsync could succeed without them). A group built while that fsync ran is
// in a later syncer batch. It must not be acknowledged: the journal below
// it has a hole. If it were, a power loss would take an acknowledged
// append. The syncer acknowledges nothing once the database has failed,
// and the journal keeps a failed fsync as its failure.
func TestNoEarlyAckAfterFailedJournalFsync(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	var armed atomic.Bool
	blocked, release := make(chan struct{}), make(chan struct{})
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !isSyncOp(op) || !strings.Contains(op.Path, "/"+JournalDir+"/") {
			return nil
		}
		if armed.CompareAndSwap(true, false) {
			close(blocked)
			<-release
			return errorfs.ErrInjected
		}
		return nil
	})
	ffs := newFaultFS(mem, inj, faultDropUnsynced)
	opts := Options{SettleInterval: time.Hour, SettleBytes: 1 << 30}
	db := mustOpen(t, ffs, opts)
	if _, err := db.Put(ctx, "a", []byte("k0"), []byte("v0")); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	xDone := make(chan error, 1)
	go func() {
		_, err := db.Put(ctx, "a", []byte("k1"), []byte("v1"))
		xDone <- err
	}()
	<-blocked // the syncer is inside X's fsync, which will fail
	type res struct {
		r   Receipt
		err error
	}
	eDone := make(chan res, 1)
	go func() {
		r, err := db.Put(ctx, "b", []byte("k2"), []byte("v2"))
		eDone <- res{r, err}
	}()
	waitFor(t, "E queued behind X's fsync", func() bool {
		db.commit.applier.mu.Lock()
		defer db.commit.applier.mu.Unlock()
		return len(db.commit.applier.queue) > 0
	})
	close(release)
	errX := <-xDone
	e := <-eDone
	t.Logf("X (fsync failed): %v", errX)
	t.Logf("E (built during X's fsync): receipt seq %d, err %v; db failed: %v", e.r.Seq, e.err, db.failed.Load() != nil)
	crashed := ffs.crashState(0, 1) // power loss now
	_ = db.Close()
	if e.err != nil {
		return // not acknowledged: nothing to check
	}
	db2 := mustOpen(t, crashed, opts)
	defer db2.Close()
	for _, ev := range db2.RecoveryReport().Events {
		t.Logf("recovery: %v", ev)
	}
	v, err := db2.Get(ctx, []byte("k2"))
	if err != nil || v.Hash != e.r.Hash {
		t.Fatalf("ACKNOWLEDGED APPEND LOST: Put(b,k2) returned success after the journal fsync failure, but after a power loss Get(k2) = %+v, %v", v, err)
	}
}

// TestReadsFailUntilReopenAfterApplierFailure: when the applier fails (here
// fsyncing a segment it seals) after the append was acknowledged, the
// append is in the fsynced journal but not in the index. A read that
// answered without it would contradict the acknowledgement, so every read
// returns the failure (IO_001) until the database is reopened, and the
// reopened database has the append. (docs/RELIABILITY.md)
func TestReadsFailUntilReopenAfterApplierFailure(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	var armed atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if armed.Load() && isSyncOp(op) && strings.HasSuffix(op.Path, ".seg") {
			return errorfs.ErrInjected
		}
		return nil
	})
	db := mustOpen(t, errorfs.Wrap(testutil.LockOrdered(mem), inj), Options{SegmentSize: 1024})
	big := make([]byte, 900)
	if _, err := db.Put(ctx, "other", []byte("k0"), []byte("v0")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "a", []byte("k1"), big); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	// k2 seals segment 1 of "a": the applier fsyncs it, and that fails.
	r2, err := db.Put(ctx, "a", []byte("k2"), big)
	if err != nil {
		t.Fatalf("put k2 (acknowledged after its journal fsync): %v", err)
	}
	waitFor(t, "the applier's failure", func() bool { return db.failed.Load() != nil })
	if _, err := db.Get(ctx, []byte("k0")); !errors.Is(err, ErrWriteFailed) {
		t.Errorf("Get of another anchor's key after the failure: %v, want IO_001", err)
	}
	if _, _, err := db.AnchorInfo(context.Background(), "other"); !errors.Is(err, ErrWriteFailed) {
		t.Errorf("AnchorInfo after the failure: %v, want IO_001", err)
	}
	if _, err := db.Put(ctx, "other", []byte("k3"), []byte("v")); !errors.Is(err, ErrWriteFailed) {
		t.Errorf("Put after the failure: %v, want IO_001", err)
	}
	_ = db.Close()

	db2 := mustOpen(t, mem, Options{SegmentSize: 1024})
	defer db2.Close()
	v, err := db2.Get(ctx, []byte("k2"))
	if err != nil || v.Hash != r2.Hash {
		t.Fatalf("after reopen, k2: %+v, %v; want the acknowledged receipt %+v", v, err, r2)
	}
	if v, err := db2.Get(ctx, []byte("k0")); err != nil || string(v.Value) != "v0" {
		t.Fatalf("after reopen, k0: %+v, %v", v, err)
	}
}
