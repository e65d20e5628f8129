package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestVerifySnapshotFindingKeepsTheReadersOffset: a damaged snapshot's finding
// carries the byte offset the snapshot reader located the damage at, as
// VerifySnapshot reports it, and a message without the code's text.
func TestVerifySnapshotFindingKeepsTheReadersOffset(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{FS: fs})
	defer db.Close()
	for i := 0; i < 50; i++ {
		if _, err := db.Put(ctx, fmt.Sprintf("a%d", i%3), []byte(fmt.Sprintf("k%d", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	info, err := db.CreateSnapshot(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := fs.UnsafeGetFileDataBuffer(info.Path)
	data[len(data)/2] ^= 1
	_, verr := db.VerifySnapshot(ctx, info.Path)
	var want *errs.Error
	if !errors.As(verr, &want) || want.Code != errs.CodeSnapshotCorrupted || want.Offset == 0 {
		t.Fatalf("VerifySnapshot of the damaged file: %v; want INT_003 located at a non-zero offset", verr)
	}
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil || rep.OK || len(rep.Failures) != 1 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	f := rep.Failures[0]
	if f.Code != errs.CodeSnapshotCorrupted || f.File != info.Path || f.Offset != want.Offset {
		t.Errorf("finding %s %s offset %d; want INT_003 %s offset %d", f.Code, f.File, f.Offset, info.Path, want.Offset)
	}
	if ferr := f.Err(); ferr.Offset != want.Offset || !errors.Is(ferr, ErrSnapshotCorrupted) {
		t.Errorf("finding as an error: %v offset %d", ferr, ferr.Offset)
	}
	checkFindingMessages(t, rep)
}

// A snapshot the audit log records as created, and not as removed, whose
// file is gone is an INT_003 finding. Only a compaction removes a snapshot,
// and it audits the removal first; a file gone otherwise is lost or deleted
// by hand, after a truncation with it the only copy of the state below the
// log's start.
func TestVerifyFindsAMissingAuditedSnapshot(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, _ := compactFixture(t, fs)
	defer db.Close()
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	list, err := db.Snapshots(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("snapshots: %+v %v", list, err)
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("before: %+v %v", rep, err)
	}
	if err := fs.Remove(list[0].Path); err != nil {
		t.Fatal(err)
	}
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil || rep.OK || len(rep.Failures) != 1 {
		t.Fatalf("verify without the snapshot the log was cut below: %+v %v; want one INT_003 finding", rep, err)
	}
	f := rep.Failures[0]
	if f.Code != errs.CodeSnapshotCorrupted || f.File != list[0].Path || !strings.Contains(f.Message, list[0].Name) {
		t.Errorf("finding %+v; want INT_003 naming %s", f, list[0].Path)
	}
	checkFindingMessages(t, rep)
	// SkipSnapshots leaves it out, as it leaves out the files.
	if rep, err := db.Verify(ctx, VerifyOptions{SkipSnapshots: true}); err != nil || !rep.OK {
		t.Fatalf("SkipSnapshots: %+v %v", rep, err)
	}
}

// The index's record of the audit log's head is what tells a lost or altered
// last line from a torn append. A malformed row is INT_004, as a malformed
// meta row is elsewhere: taken as no row at all, it would let the last line
// of the log go with verify saying ok.
func TestVerifyFindsAMalformedAuditHeadRow(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{FS: fs})
	defer db.Close()
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateSnapshot(ctx, ""); err != nil {
		t.Fatal(err)
	}
	row, ok, err := db.metaBytes(schema.MetaAudit)
	if err != nil || !ok {
		t.Fatalf("no audit head row: %v", err)
	}
	if err := db.index.Set(schema.MetaKey(schema.MetaAudit), row[:8], pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil || rep.OK || len(rep.Failures) != 1 || rep.Failures[0].Code != errs.CodeIndexMismatch || rep.Failures[0].File != db.AuditPath() {
		t.Fatalf("verify with a malformed audit head row: %+v %v; want one INT_004 finding for the audit log", rep, err)
	}
	checkFindingMessages(t, rep)
}

// A line appended to the audit log by anyone but the database (the chain has
// no key: anyone can extend it) is past the head the index recorded. It
// vouches for nothing and the database refuses to append after it (INT_002);
// verify reports it as an INT_002 finding naming the first such line. A line
// the database was about to write when it stopped (its index recorded it as
// next) is not one.
func TestVerifyFindsAuditLinesPastTheHead(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{FS: fs})
	defer db.Close()
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	info, err := db.CreateSnapshot(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("before: %+v %v", rep, err)
	}
	line, err := snapshot.Append(fs, db.AuditPath(), snapshot.AuditEntry{Time: time.Now(), Action: string(snapshot.ActionDeleteSnapshot),
		Removed: []snapshot.AuditItem{snapshot.SnapshotItem(info)}, Note: "not by the database"})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil || rep.OK || len(rep.Failures) != 1 {
		t.Fatalf("verify with a line appended past the head: %+v %v; want one INT_002 finding", rep, err)
	}
	if f := rep.Failures[0]; f.Code != errs.CodeChainBroken || f.File != db.AuditPath() || f.Seq != line.Seq {
		t.Errorf("finding %+v; want INT_002 at line %d of %s", f, line.Seq, db.AuditPath())
	}
	checkFindingMessages(t, rep)
	// The database's own next line, written before its head row was: the
	// index recorded it as next, which vouches for it.
	if err := db.index.Set(schema.MetaKey(schema.MetaAuditNext), schema.AppendAuditHead(nil, line.Seq, line.Hash), pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("verify with the line the index recorded as next: %+v %v", rep, err)
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

// A snapshot or compaction appends an audit line first, then the index's
// count of lines. VerifyAuditLog reads that count before the log: a line
// counted is then in the log, and lines are only ever added. Read the other
// way round, an append in between makes a sound log look short (INT_002
// "audit log has 1 lines; 2 were appended"), a false report of a lost line
// from a Verify or a VerifyAuditLog run beside a compaction.
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

// Verify checks the snapshots and the audit log under compactMu, as one
// compaction left them. A compaction removing a snapshot (it keeps only the
// newest) between Verify's listing and its check would otherwise make Verify
// fail with INPUT_001 "snapshot ... does not exist" instead of reporting on
// the snapshots the database has.
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
