package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A snapshot damaged after it was written makes every verify fail (INT_003),
// and deleting it by hand does too (an audited snapshot missing): no step
// brought verify back to ok. RetireSnapshot is that step, audited: the audit
// log's new last line removes the snapshot and names the finding, the file
// is in lost+found/, and verify is ok, also after a reopen. A snapshot that
// passes its checks is not retired, nor a name that is not a snapshot's.
func TestRetireADamagedSnapshotBringsVerifyBack(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, memOpts(fs))
	defer func() { _ = db.Close() }()
	for i := 0; i < 20; i++ {
		if _, err := db.Put(ctx, "a", []byte{'k', byte('a' + i)}, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	bad, err := db.CreateSnapshot(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "a", []byte("later"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	good, err := db.CreateSnapshot(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	flipByte(t, fs, bad.Path, bad.Size/2)
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || rep.OK {
		t.Fatalf("verify with a damaged snapshot: ok=%v %v", rep.OK, err)
	}

	if _, err := db.RetireSnapshot(ctx, good.Name); errs.CodeOf(err) != errs.CodeInvalidInput {
		t.Errorf("retiring a snapshot that passes its checks: %v, want INPUT_001", err)
	}
	for _, name := range []string{"", "../audit.log", "nosuch.snap"} {
		if _, err := db.RetireSnapshot(ctx, name); errs.CodeOf(err) != errs.CodeInvalidInput && errs.CodeOf(err) != errs.CodeDependencyMissing {
			t.Errorf("retiring %q: %v", name, err)
		}
	}

	r, err := db.RetireSnapshot(ctx, bad.Name)
	if err != nil {
		t.Fatal(err)
	}
	if r.Finding.Code != errs.CodeSnapshotCorrupted || !strings.HasPrefix(r.MovedTo, fs.PathJoin("db", LostAndFound)) {
		t.Fatalf("retired: %+v", r)
	}
	if _, err := fs.Stat(bad.Path); !oserrorIsNotExist(err) {
		t.Fatalf("the retired snapshot is still in snapshots/: %v", err)
	}
	if _, err := fs.Stat(r.MovedTo); err != nil {
		t.Fatalf("the retired snapshot is not in lost+found: %v", err)
	}
	var last snapshot.AuditEntry
	for e, err := range snapshot.ReadAudit(fs, db.AuditPath()) {
		if err != nil {
			t.Fatal(err)
		}
		last = e
	}
	if last.Action != snapshot.AuditRetireSnapshot || len(last.Removed) != 1 || last.Removed[0].Name != bad.Name ||
		last.Removed[0].Hash != bad.FileHash || !strings.Contains(last.Note, "INT_003") || !strings.Contains(last.Note, LostAndFound) {
		t.Fatalf("the audit log's last line: %+v", last)
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("verify after the retirement: %+v %v", rep.Failures, err)
	}
	if _, err := db.RetireSnapshot(ctx, bad.Name); errs.CodeOf(err) != errs.CodeDependencyMissing {
		t.Errorf("retiring it again: %v, want STATE_003", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = mustOpen(t, fs, memOpts(fs))
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("verify after a reopen: %+v %v", rep.Failures, err)
	}

	// A snapshot deleted by hand: verify reports the audited snapshot
	// missing until its retirement records the removal.
	if err := fs.Remove(good.Path); err != nil {
		t.Fatal(err)
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || rep.OK {
		t.Fatalf("verify with an audited snapshot deleted by hand: ok=%v %v", rep.OK, err)
	}
	if r, err := db.RetireSnapshot(ctx, good.Name); err != nil || r.MovedTo != "" {
		t.Fatalf("retiring a snapshot deleted by hand: %+v %v", r, err)
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("verify after retiring the snapshot deleted by hand: %+v %v", rep.Failures, err)
	}
}
