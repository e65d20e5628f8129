//go:build unix

package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A dangling symbolic link named DBID or audit.log in the database
// directory read as absent: vfs.FS has no Lstat, and Stat through a link
// to nothing says "does not exist". So Open took a DBID link for a new
// database's missing id and wrote a new id over the link (the database
// changed its identity, and the checkpoints naming the old one no longer
// matched it), and an audit log link was an empty log: verify said ok, and
// the next snapshot or compaction wrote its line through the link,
// creating the link's target wherever it pointed. Each is now what a FIFO
// or a directory there is: a DBID that is not a regular file is malformed
// (INPUT_001, Open fails), an audit log that is not one is INT_002 (a
// verify finding; what would append to it refuses). Nothing is written
// through the link or over it.

// danglingTarget makes path a symbolic link to a name beside it that does
// not exist, and returns that name.
func danglingTarget(t *testing.T, path string) string {
	t.Helper()
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	target := filepath.Join(filepath.Dir(path), "elsewhere")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	return target
}

// wantLinkUntouched fails unless path is still a symbolic link to target
// and target still does not exist.
func wantLinkUntouched(t *testing.T, path, target string) {
	t.Helper()
	if got, err := os.Readlink(path); err != nil || got != target {
		t.Errorf("%s: link to %q (%v); want the link to %s left as it was", path, got, err, target)
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("the link's target %s was created (%v)", target, err)
	}
}

func TestDanglingDBIDLink(t *testing.T) {
	dir, _ := foreignDB(t)
	path := filepath.Join(dir, IDFile)
	target := danglingTarget(t, path)
	err := within(t, "Open", nil, func() error {
		db, err := Open(dir, Options{FS: vfs.Default})
		if err == nil {
			_ = db.Close()
		}
		return err
	})
	wantCodeAt(t, "open", err, errs.CodeInvalidInput, path)
	var e *errs.Error
	if !errors.As(err, &e) || e.File != path {
		t.Errorf("open: %#v; want the error located at %s", err, path)
	}
	wantLinkUntouched(t, path, target)
}

func TestDanglingAuditLogLink(t *testing.T) {
	ctx := context.Background()
	dir, _ := foreignDB(t)
	path := filepath.Join(dir, AuditFile)
	target := danglingTarget(t, path)
	db := openWithin(t, "Open", nil, dir, Options{FS: vfs.Default, SegmentSize: 1024})
	defer db.Close()
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil {
		t.Fatalf("verify: %v; want a finding, not an error", err)
	}
	if !hasFinding(rep, errs.CodeChainBroken, path) {
		t.Errorf("verify: ok=%v %+v; want an INT_002 finding at %s", rep.OK, rep.Failures, path)
	}
	if _, err := db.CreateSnapshot(ctx, ""); errs.CodeOf(err) != errs.CodeChainBroken {
		t.Errorf("create snapshot: %v; want INT_002: the audit log cannot take its line", err)
	}
	res, err := db.Compact(ctx, snapshot.DefaultPolicy(), CompactOptions{Apply: true})
	if err == nil && res.Applied && len(res.Plan.Actions) > 0 {
		t.Errorf("compaction applied %d actions with no audit log to record them", len(res.Plan.Actions))
	}
	if list, err := db.Snapshots(ctx); err != nil || len(list) != 0 {
		t.Errorf("snapshots %+v %v; want none left behind unaudited", list, err)
	}
	wantLinkUntouched(t, path, target)
}
