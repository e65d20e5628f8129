//go:build unix

package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/journal"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestVerifyReportsOldForeignJournalEntry: an entry named like a journal
// file older than the settle point that is not a regular file (a FIFO, a
// directory, a dangling link) is never read, and settles leave it in place
// (it is no file the journal wrote). verify said nothing of it, so the
// only trace of it was that rebuild-index refused. verify now reports it,
// as it reports a foreign entry in the anchors tree: INT_002 at the entry,
// saying what it is, without opening it.
func TestVerifyReportsOldForeignJournalEntry(t *testing.T) {
	ctx := context.Background()
	for _, kind := range foreignKinds {
		t.Run(kind, func(t *testing.T) {
			dir, _ := foreignDB(t)
			opts := Options{FS: vfs.Default, SegmentSize: 1024}
			jdir := filepath.Join(dir, JournalDir)
			gens, err := journal.List(vfs.Default, jdir)
			if err != nil || len(gens) == 0 || gens[0] == 1 {
				t.Fatalf("journal generations %v %v; want the first one gone", gens, err)
			}
			older := filepath.Join(jdir, journal.FileName(1))
			makeForeign(t, kind, older)
			fifos := []string{older}
			db := openWithin(t, "Open", fifos, dir, opts)
			defer db.Close()
			// A settle passes it by (RemoveBefore leaves it in place).
			if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
				t.Fatal(err)
			}
			if err := db.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			rep := within(t, "verify", fifos, func() VerifyReport {
				rep, err := db.Verify(ctx, VerifyOptions{})
				if err != nil {
					t.Errorf("verify: %v; want a finding, not an error", err)
				}
				return rep
			})
			if rep.OK || !hasFinding(rep, errs.CodeChainBroken, older) {
				t.Fatalf("verify: ok=%v %+v; want an INT_002 finding at %s", rep.OK, rep.Failures, older)
			}
			for _, f := range rep.Failures {
				if f.File == older && !strings.Contains(f.Message, "not a regular file") && !strings.Contains(f.Message, "dangling") {
					t.Errorf("finding %q; want it to say what the entry is", f.Message)
				}
				if f.File != older {
					t.Errorf("finding %+v; want only the foreign entry's", f)
				}
			}
			if _, err := os.Lstat(older); err != nil {
				t.Fatalf("the foreign entry was removed: %v", err)
			}
			// Removed by an operator, the database verifies clean.
			if err := os.RemoveAll(older); err != nil {
				t.Fatal(err)
			}
			rep, err = db.Verify(ctx, VerifyOptions{})
			if err != nil || !rep.OK {
				t.Fatalf("verify after removal: %v %+v", err, rep.Failures)
			}
		})
	}
}
