//go:build unix

package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestReview4ForeignEntriesInCheckpointsAndSnapshots: a directory named
// x.note in checkpoints/ made verify fail with IO_001 (exit 2: it read the
// directory as a note), a FIFO so named hung it (the open of a FIFO blocks
// until a writer comes), and a dangling symbolic link failed it with
// IO_001 too. In snapshots/ a FIFO named x.snap hung List, and with it
// verify, snapshot list and compaction. Such an entry is now listed as a
// file that cannot be read, as a garbage file of that name is: a finding
// (AUTH_003 for a checkpoint, INT_003 for a snapshot), never opened.
func TestReview4ForeignEntriesInCheckpointsAndSnapshots(t *testing.T) {
	ctx := context.Background()
	for _, kind := range []string{"directory", "fifo", "dangling link"} {
		t.Run(kind, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "db")
			db, err := Open(dir, Options{FS: vfs.Default})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
				t.Fatal(err)
			}
			if _, err := db.CreateSnapshot(ctx, ""); err != nil {
				t.Fatal(err)
			}
			skey, vkey := coverKeys(t)
			if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
				t.Fatal(err)
			}
			paths := map[errs.Code]string{
				errs.CodeSignatureInvalid:  filepath.Join(dir, CheckpointsDir, "x.note"),
				errs.CodeSnapshotCorrupted: filepath.Join(db.SnapshotsDir(), "x.snap"),
			}
			for _, p := range paths {
				var err error
				switch kind {
				case "directory":
					err = os.Mkdir(p, 0o755)
				case "fifo":
					err = syscall.Mkfifo(p, 0o644)
				case "dangling link":
					err = os.Symlink(filepath.Join(dir, "nowhere"), p)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			type result struct {
				rep VerifyReport
				err error
			}
			done := make(chan result, 1)
			go func() {
				rep, err := db.Verify(ctx, VerifyOptions{VerifierKeys: []string{vkey}})
				done <- result{rep, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(20 * time.Second):
				// Let the blocked open of a FIFO through, so Close can end.
				for _, p := range paths {
					if f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
						_ = f.Close()
					}
				}
				<-done
				t.Fatal("verify hangs on a FIFO")
			}
			if r.err != nil {
				t.Fatalf("verify: %v; want findings, not an error", r.err)
			}
			for code, p := range paths {
				found := false
				for _, f := range r.rep.Failures {
					if f.File == p && f.Code == code {
						found = true
						if !strings.Contains(f.Message, "not a regular file") && !strings.Contains(f.Message, "dangling") {
							t.Errorf("finding for %s: %q; want it to say what the entry is", p, f.Message)
						}
					}
				}
				if !found {
					t.Errorf("no %s finding for %s: %+v", code, p, r.rep.Failures)
				}
			}
			if len(r.rep.Failures) != 2 {
				t.Errorf("findings %+v; want one for each foreign entry", r.rep.Failures)
			}
			// The listings name them, with the reason, and read nothing.
			list, err := db.Snapshots(ctx)
			if err != nil || len(list) != 2 {
				t.Fatalf("snapshots: %d %v", len(list), err)
			}
			if list[0].Name != "x.snap" || errs.CodeOf(list[0].Err) != errs.CodeSnapshotCorrupted {
				t.Fatalf("snapshot list: %+v", list[0])
			}
		})
	}
}
