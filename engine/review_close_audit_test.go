package engine

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestVerifyAuditLogAfterClose: VerifyAuditLog reads the audit head row
// from the index. It held neither of Close's gates, so a call racing Close
// (or made after it) read the closed Pebble, which panics ("pebble:
// closed") and takes the process down, instead of being refused with
// IO_001 "database is closed" like every other read.
func TestVerifyAuditLogAfterClose(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t, vfs.NewMem(), Options{})
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateSnapshot(ctx, ""); err != nil { // one audit line
		t.Fatal(err)
	}
	if _, err := db.VerifyAuditLog(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("VerifyAuditLog after Close panicked: %v", r)
		}
	}()
	if _, err := db.VerifyAuditLog(ctx); !isClosedErr(err) {
		t.Fatalf("VerifyAuditLog after Close: %v; want IO_001 database is closed", err)
	}
}

// readCloseHookFS calls hook (once armed) when a file whose path contains match
// is closed after a read.
type readCloseHookFS struct {
	vfs.FS
	match string
	armed atomic.Bool
	hook  func()
}

func (fs *readCloseHookFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.Open(name, opts...)
	if err != nil || !strings.Contains(name, fs.match) {
		return f, err
	}
	return &readCloseHookFile{File: f, fs: fs}, nil
}

type readCloseHookFile struct {
	vfs.File
	fs *readCloseHookFS
}

func (f *readCloseHookFile) Close() error {
	err := f.File.Close()
	if f.fs.armed.CompareAndSwap(true, false) {
		f.fs.hook()
	}
	return err
}

// TestVerifyAuditLogRacingAuditAppend: VerifyAuditLog read the audit log,
// then the index's count of the lines appended to it. A snapshot or
// compaction that appended a line in between (the line first, then the
// count) made a sound log look short: INT_002 "audit log has 1 lines; 2
// were appended", a false report of a lost line from a Verify or a
// VerifyAuditLog run beside a compaction. The count is read first now: a
// line counted is in the log before the count is written, and lines are
// only ever added.
func TestVerifyAuditLogRacingAuditAppend(t *testing.T) {
	ctx := context.Background()
	hfs := &readCloseHookFS{FS: vfs.NewMem(), match: AuditFile}
	db := mustOpen(t, hfs, Options{})
	defer db.Close()
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateSnapshot(ctx, ""); err != nil {
		t.Fatal(err)
	}
	var hookErr error
	hfs.hook = func() { _, hookErr = db.CreateSnapshot(ctx, "") }
	hfs.armed.Store(true)
	head, err := db.VerifyAuditLog(ctx)
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if hfs.armed.Load() {
		t.Fatal("the audit log was not read")
	}
	if err != nil {
		t.Fatalf("VerifyAuditLog beside an audit append: %v", err)
	}
	if head.Lines < 1 {
		t.Fatalf("head %+v", head)
	}
	if head, err = db.VerifyAuditLog(ctx); err != nil || head.Lines != 2 {
		t.Fatalf("after: %+v, %v", head, err)
	}
}

// TestVerifyRacingCompactionRemovingSnapshot: Verify listed the snapshots,
// then verified each; a compaction that removed one in between (it keeps
// only the newest) made Verify fail with INPUT_001 "snapshot ... does not
// exist" instead of reporting on the snapshots the database has. Verify
// now checks the snapshots and the audit log under compactMu, as one
// compaction left them.
func TestVerifyRacingCompactionRemovingSnapshot(t *testing.T) {
	ctx := context.Background()
	hfs := &openHookFS{FS: vfs.NewMem(), match: AuditFile}
	db := mustOpen(t, hfs, Options{})
	defer db.Close()
	for i := 0; i < 2; i++ {
		if _, err := db.Put(ctx, "a", []byte("k"), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		if _, err := db.CreateSnapshot(ctx, ""); err != nil {
			t.Fatal(err)
		}
	}
	policy := snapshot.DefaultPolicy()
	policy.Snapshot = snapshot.Triggers{}
	policy.KeepSnapshots = 1
	compacted := make(chan error, 1)
	hfs.hook = func() {
		// Verify has listed the snapshots and reads the audit log next:
		// a compaction now removes the older snapshot, unless it has to
		// wait for Verify (then it runs once Verify is done).
		go func() {
			res, err := db.Compact(ctx, policy, CompactOptions{Apply: true})
			if err == nil && len(res.Plan.Actions) == 0 {
				err = fmt.Errorf("the compaction planned nothing")
			}
			compacted <- err
		}()
		select {
		case err := <-compacted:
			compacted <- err
		case <-time.After(500 * time.Millisecond):
		}
	}
	hfs.armed.Store(true)
	rep, err := db.Verify(ctx, VerifyOptions{})
	if hfs.armed.Load() {
		t.Fatal("Verify did not read the audit log")
	}
	if err != nil || !rep.OK {
		t.Fatalf("verify beside a compaction: %v %+v", err, rep)
	}
	if err := <-compacted; err != nil {
		t.Fatal(err)
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("verify after the compaction: %v %+v", err, rep)
	}
}
