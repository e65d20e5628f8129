package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestFailedSegmentWriteNotReadAsCorruption: a segment write that fails
// after leaving garbage in its range (faultGarbage) must read back as the
// write failure, IO_001 — never as corruption (INT_001) — and the engine
// must not write the range again once it has stopped.
//
// This is the interleaving TestErrorInjection/garbage hit by timing: a
// background settle's flush failed while a Log was reading the anchor; the
// Log's read-ahead took in the garbage, then the next record's ensureWritten
// retried the failed write (which succeeded) and the record was parsed from
// the stale read-ahead. Here every step is sequenced by hand, and each
// reader is the first to meet the failed range in a database of its own.
func TestFailedSegmentWriteNotReadAsCorruption(t *testing.T) {
	ctx := context.Background()
	const anchor = "garbage"
	wantIO := func(t *testing.T, what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrWriteFailed) {
			t.Errorf("%s: got %v (code %q), want IO_001: the range of a failed write must not read as anything else", what, err, CodeOf(err))
		}
	}
	// setup leaves records 1..3 in the file and the write of 4..6 failed,
	// with garbage in its first sector. It returns how many segment writes
	// the engine made after the failed one.
	setup := func(t *testing.T) (*DB, func() int32) {
		var armed, fired atomic.Bool
		var failedAt atomic.Int64
		var after atomic.Int32
		inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
			if !strings.Contains(op.Path, "/anchors/") || (op.Kind != errorfs.OpFileWriteAt && op.Kind != errorfs.OpFileWrite) {
				return nil
			}
			if fired.Load() {
				after.Add(1)
			}
			if armed.CompareAndSwap(true, false) {
				fired.Store(true)
				failedAt.Store(op.Offset)
				return errorfs.ErrInjected
			}
			return nil
		})
		db, err := Open("db", Options{FS: newFaultFS(vfs.NewCrashableMem(), inj, faultGarbage)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		put := func(i int) {
			t.Helper()
			val := bytes.Repeat([]byte{byte('a' + i)}, 300)
			if _, err := db.Put(ctx, anchor, []byte(fmt.Sprint("k", i)), val); err != nil {
				t.Fatalf("put %d: %v", i, err)
			}
		}
		// Records 1..3 reach the file (a read flushes the buffer); 4..6
		// stay in the anchor's buffer.
		for i := 1; i <= 3; i++ {
			put(i)
		}
		if _, err := db.Record(ctx, anchor, 1); err != nil {
			t.Fatal(err)
		}
		for i := 4; i <= 6; i++ {
			put(i)
		}
		// The settle's flush of 4..6 fails and leaves garbage where it wrote.
		armed.Store(true)
		if err := db.Sync(context.Background()); !errors.Is(err, ErrWriteFailed) {
			t.Fatalf("Sync with a failing segment write: %v, want IO_001", err)
		}
		if !fired.Load() {
			t.Fatal("the injected segment write failure did not fire")
		}
		row, ok, err := db.location(anchor, 4)
		if err != nil || !ok {
			t.Fatalf("row of seq 4: %v %v", ok, err)
		}
		if row.Offset != failedAt.Load() {
			t.Fatalf("the failed write was at %d, record 4 at %d", failedAt.Load(), row.Offset)
		}
		return db, after.Load
	}
	noRetry := func(t *testing.T, after func() int32) {
		t.Helper()
		if n := after(); n > 0 {
			t.Errorf("%d segment writes after the failed one: the engine must stop writing, not retry", n)
		}
	}

	t.Run("log", func(t *testing.T) {
		// A Log reads ahead from record 1 — over the garbage — and must
		// stop at record 4 with the write failure.
		db, after := setup(t)
		var seqs []uint64
		var logErr error
		for rec, err := range db.Log(ctx, anchor, 1, 0) {
			if err != nil {
				logErr = err
				break
			}
			seqs = append(seqs, rec.Seq)
		}
		if len(seqs) != 3 {
			t.Errorf("Log read seqs %v before stopping, want 1..3", seqs)
		}
		wantIO(t, "Log over the failed write", logErr)
		noRetry(t, after)
	})
	t.Run("record", func(t *testing.T) {
		db, after := setup(t)
		for seq := uint64(4); seq <= 6; seq++ {
			_, err := db.Record(ctx, anchor, seq)
			wantIO(t, fmt.Sprintf("Record %d", seq), err)
		}
		for seq := uint64(1); seq <= 3; seq++ {
			if _, err := db.Record(ctx, anchor, seq); err != nil {
				t.Errorf("Record %d, written before the failure: %v", seq, err)
			}
		}
		noRetry(t, after)
	})
	t.Run("verify", func(t *testing.T) {
		// Verify reads the file as it stands: the anchor's bytes past the
		// failure cannot be checked, which is IO_001, not a finding.
		db, after := setup(t)
		rep, err := db.Verify(ctx, VerifyOptions{})
		for _, f := range rep.Failures {
			t.Errorf("Verify after the failed write reports %s: %s (the engine's own failed write is not damage)", f.Code, f.Message)
		}
		wantIO(t, "Verify", err)
		noRetry(t, after)
	})
}
