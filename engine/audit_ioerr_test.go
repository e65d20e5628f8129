package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// auditReadFault fails the n-th read operation (stat, open, read) on the
// audit log after it is armed, and says whether it did.
type auditReadFault struct {
	mu    sync.Mutex
	n     int // -1: disarmed
	seen  int
	fired *errorfs.Op
}

func (f *auditReadFault) MaybeError(op errorfs.Op) error {
	if !strings.HasSuffix(op.Path, "/"+AuditFile) || op.Kind.ReadOrWrite() != errorfs.OpIsRead {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n < 0 {
		return nil
	}
	f.seen++
	if f.seen-1 != f.n || f.fired != nil {
		return nil
	}
	f.fired = &op
	return errorfs.ErrInjected
}

func (f *auditReadFault) String() string { return "audit read fault" }

func (f *auditReadFault) arm(n int) {
	f.mu.Lock()
	f.n, f.seen, f.fired = n, 0, nil
	f.mu.Unlock()
}

func (f *auditReadFault) disarm() *errorfs.Op {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n = -1
	return f.fired
}

// TestAuditLogReadErrors fails, one at a time, every read of the audit
// log that verify, CreateSnapshot and an applied compaction make. A failed
// read says nothing about what the log holds, yet the audit log's scan
// coded a failed open or read INT_002: verify reported the log as broken
// (a finding, exit 1) and a compaction or snapshot took it for a log that
// vouches for no snapshot. Each must now fail with IO_001 — or succeed,
// when the read was one it could do without — and report no finding; with
// the failure gone, the database verifies clean. A head row the index
// lost after its line was written (the line recorded as next) is covered
// too: the audit head then reads the log, and a failed read there made
// verify report the database's own last line as one past its head.
func TestAuditLogReadErrors(t *testing.T) {
	for _, headLost := range []bool{false, true} {
		t.Run(fmt.Sprintf("head row lost=%v", headLost), func(t *testing.T) {
			testAuditLogReadErrors(t, headLost)
		})
	}
}

func testAuditLogReadErrors(t *testing.T, headLost bool) {
	ctx := context.Background()
	mem := vfs.NewMem()
	fault := &auditReadFault{n: -1}
	db := mustOpen(t, errorfs.Wrap(mem, fault), Options{SegmentSize: 4096})
	defer db.Close()
	put := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			if _, err := db.Put(ctx, fmt.Sprint("a", i%3), []byte(fmt.Sprint("k", i%7)), []byte(fmt.Sprint("v", i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(40)
	if _, err := db.CreateSnapshot(ctx, ""); err != nil {
		t.Fatal(err)
	}
	put(10)
	if _, err := db.CreateSnapshot(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if headLost {
		// The last line was written and recorded as next; the head row
		// still names the line before (an unclean stop lost its update).
		var prev snapshot.AuditEntry
		var lines []snapshot.AuditEntry
		for e, err := range snapshot.ReadAudit(mem, db.AuditPath()) {
			if err != nil {
				t.Fatal(err)
			}
			lines = append(lines, e)
		}
		if len(lines) < 2 {
			t.Fatalf("%d audit lines", len(lines))
		}
		prev = lines[len(lines)-2]
		if err := db.index.Set(schema.MetaKey(schema.MetaAudit), schema.AppendAuditHead(nil, prev.Seq, prev.Hash), pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	clean := func(what string) {
		t.Helper()
		if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
			t.Fatalf("%s: verify without the failure: %+v %v", what, rep, err)
		}
	}
	clean("before")
	policy := snapshot.Policy{Version: "v1", Snapshot: snapshot.Triggers{EveryRecords: 1}, KeepSnapshots: 1, RawLog: "forever", VerifyBeforeDelete: true}
	ops := []struct {
		name string
		run  func() (findings []Finding, err error)
	}{
		{"verify", func() ([]Finding, error) {
			rep, err := db.Verify(ctx, VerifyOptions{})
			return rep.Failures, err
		}},
		{"create snapshot", func() ([]Finding, error) {
			put(3)
			_, err := db.CreateSnapshot(ctx, "")
			return nil, err
		}},
		{"compact", func() ([]Finding, error) {
			put(3)
			res, err := db.Compact(ctx, policy, CompactOptions{Apply: true})
			// A plan made as if the log vouched for nothing took the
			// failed read for a broken log.
			var claims []Finding
			for _, note := range res.Plan.Notes {
				if strings.Contains(note, "cannot vouch") {
					claims = append(claims, Finding{Code: errs.CodeChainBroken, Message: "plan note: " + note})
				}
			}
			return claims, err
		}},
	}
	for _, op := range ops {
		fired := 0
		for i := 0; ; i++ {
			if i == 1000 {
				t.Fatalf("%s still reads the audit log after 1000 operations", op.name)
			}
			fault.arm(i)
			findings, err := op.run()
			got := fault.disarm()
			if got == nil {
				if err != nil || len(findings) > 0 {
					t.Fatalf("%s with no failure injected: %v %+v", op.name, err, findings)
				}
				break
			}
			fired++
			what := fmt.Sprintf("%s with audit read %d (%v) failing", op.name, i, got.Kind)
			if err != nil && (errs.CodeOf(err) != errs.CodeWriteFailed || errs.IsCorruption(err)) {
				t.Errorf("%s: %v; want IO_001: a failed read is no integrity finding", what, err)
			}
			for _, f := range findings {
				t.Errorf("%s: finding %+v; a failed read is none", what, f)
			}
			clean(what)
		}
		if fired == 0 {
			t.Fatalf("%s read no audit log: the test injects nothing", op.name)
		}
		t.Logf("%s: %d audit reads failed in turn", op.name, fired)
	}
}

// TestRebuildAuditLogReadErrors: a rebuilt index takes the audit log's
// head from the log (adoptAuditHead), and any failure of that read left
// the index with no head: from then on a line lost from the log's end
// went unnoticed. Every read of the log an Open that rebuilds makes fails
// in turn: the Open fails with IO_001, or it succeeds with the log's head
// recorded.
func TestRebuildAuditLogReadErrors(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	db := mustOpen(t, mem, Options{SegmentSize: 4096})
	for i := 0; i < 3; i++ {
		if _, err := db.Put(ctx, "a", []byte(fmt.Sprint("k", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
		if _, err := db.CreateSnapshot(ctx, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	head, err := snapshot.VerifyAudit(mem, "db/"+AuditFile)
	if err != nil || head.Lines != 3 {
		t.Fatalf("audit log %+v %v", head, err)
	}
	fired := 0
	for i := 0; ; i++ {
		if i == 1000 {
			t.Fatal("a rebuild still reads the audit log after 1000 operations")
		}
		state := testutil.CrashClone(mem, vfs.CrashCloneCfg{})
		if err := state.RemoveAll("db/" + IndexDir); err != nil {
			t.Fatal(err)
		}
		fault := &auditReadFault{n: i}
		db, err := Open("db", Options{FS: errorfs.Wrap(state, fault), SegmentSize: 4096})
		op := fault.disarm()
		if err != nil {
			if op == nil || errs.CodeOf(err) != errs.CodeWriteFailed || errs.IsCorruption(err) {
				t.Errorf("rebuild with audit read %d failing (fired %v): %v; want IO_001", i, op != nil, err)
			}
			fired++
			// Whatever the failed Open left, the next one must end
			// with the head recorded.
			db, err := Open("db", Options{FS: state, SegmentSize: 4096})
			if err != nil {
				t.Fatalf("reopen after the rebuild with audit read %d failing: %v", i, err)
			}
			row, ok, err := db.metaBytes(schema.MetaAudit)
			if err != nil || !ok || string(row) != string(schema.AppendAuditHead(nil, head.Lines, head.Head)) {
				t.Errorf("reopen after the rebuild with audit read %d failing: head row %x %v %v; want the log's, %d lines", i, row, ok, err, head.Lines)
			}
			_ = db.Close()
			continue
		}
		row, ok, err := db.metaBytes(schema.MetaAudit)
		if err != nil || !ok || string(row) != string(schema.AppendAuditHead(nil, head.Lines, head.Head)) {
			t.Errorf("rebuild with audit read %d failing (fired %v): head row %x %v %v; want the log's, %d lines", i, op != nil, row, ok, err, head.Lines)
		}
		_ = db.Close()
		if op == nil {
			break
		}
		fired++
	}
	if fired == 0 {
		t.Fatal("the rebuild read no audit log: the test injects nothing")
	}
	t.Logf("%d audit reads failed in turn", fired)
}
