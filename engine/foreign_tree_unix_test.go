//go:build unix

package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/journal"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Entries of the database's own tree that are not what their place needs
// — a FIFO, a directory or a dangling symbolic link where a segment, a
// stub or a journal file belongs, a FIFO where a directory belongs — hung
// Open, verify and rebuild-index for ever (the open of a FIFO for reading
// blocks until a writer comes, and no context or signal reaches it), or
// failed them as I/O errors (IO_001, exit 2). Each is now looked at before
// it is opened or listed, and is integrity damage (INT_002) of the anchor
// or journal behind it; nothing is opened, adopted, cut or removed, and
// rebuild-index refuses before it drops the index. vfs.MemFS has no FIFOs,
// so these run on the OS file system.

var foreignKinds = []string{"fifo", "directory", "dangling link"}

// makeForeign puts an entry of kind at path. A directory gets a file in it,
// so that a removal of it would fail loudly, not pass unseen.
func makeForeign(t *testing.T, kind, path string) {
	t.Helper()
	var err error
	switch kind {
	case "fifo":
		err = syscall.Mkfifo(path, 0o644)
	case "directory":
		if err = os.Mkdir(path, 0o755); err == nil {
			err = os.WriteFile(filepath.Join(path, "x"), []byte("x"), 0o644)
		}
	case "dangling link":
		err = os.Symlink(filepath.Join(filepath.Dir(path), "nowhere"), path)
	default:
		err = fmt.Errorf("kind %q", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// within runs fn and fails the test if it does not return in time. A FIFO
// among fifos is then opened for writing (without blocking), which lets a
// blocked open of it return, so that the test ends instead of hanging.
func within[T any](t *testing.T, what string, fifos []string, fn func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- fn() }()
	select {
	case v := <-done:
		return v
	case <-time.After(30 * time.Second):
		for _, p := range fifos {
			if f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				_ = f.Close()
			}
		}
		<-done
		t.Fatalf("%s hangs on a foreign entry", what)
		panic("unreachable")
	}
}

// openWithin opens the database in dir with within: it fails the test when
// Open hangs or returns an error.
func openWithin(t *testing.T, what string, fifos []string, dir string, opts Options) *DB {
	t.Helper()
	db := within(t, what, fifos, func() *DB {
		db, err := Open(dir, opts)
		if err != nil {
			t.Errorf("open: %v", err)
		}
		return db
	})
	if db == nil {
		t.FailNow()
	}
	return db
}

// foreignDB makes a closed database in a temp directory with anchor "a"
// over several segments and anchor "b" in one, and returns its directory
// and a's segment paths, oldest first.
func foreignDB(t *testing.T) (string, []string) {
	t.Helper()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "db")
	db, err := Open(dir, Options{FS: vfs.Default, SegmentSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	val := []byte(strings.Repeat("v", 100))
	for i := range 30 {
		if _, err := db.Put(ctx, "a", fmt.Appendf(nil, "a%02d", i), val); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if _, err := db.Put(ctx, "b", fmt.Appendf(nil, "b%02d", i), []byte("w")); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	adir := segment.AnchorDir(vfs.Default, dir, "a")
	names, err := os.ReadDir(adir)
	if err != nil {
		t.Fatal(err)
	}
	var segs []string
	for _, n := range names {
		if _, ok := segment.ParseFileName(n.Name()); ok {
			segs = append(segs, filepath.Join(adir, n.Name()))
		}
	}
	slices.Sort(segs)
	if len(segs) < 3 {
		t.Fatalf("anchor a has %d segments; want several", len(segs))
	}
	return dir, segs
}

// wantCodeAt fails unless err carries code and (when file is set) names it;
// what says which call err came from.
func wantCodeAt(t *testing.T, what string, err error, code errs.Code, file string) {
	t.Helper()
	testutil.WantCode(t, fmt.Errorf("%s: %w", what, err), code)
	if file != "" && !strings.Contains(err.Error(), file) {
		t.Fatalf("%s: %v; want it to name %s", what, err, file)
	}
}

// hasFinding reports whether rep has a finding of code at file.
func hasFinding(rep VerifyReport, code errs.Code, file string) bool {
	for _, f := range rep.Failures {
		if f.Code == code && f.File == file {
			return true
		}
	}
	return false
}

// TestForeignSegmentEntry: a FIFO, a directory or a dangling link in place
// of a sealed segment of anchor a, or as a segment past its newest, with
// the index intact (a clean open lists nothing) and with the index lost
// (the open rebuilds it, listing every anchor directory).
func TestForeignSegmentEntry(t *testing.T) {
	ctx := context.Background()
	for _, kind := range foreignKinds {
		for _, place := range []string{"sealed", "past newest"} {
			t.Run(kind+"/"+place, func(t *testing.T) {
				dir, segs := foreignDB(t)
				path := segs[0]
				aside := filepath.Join(filepath.Dir(dir), "aside.seg")
				if place == "sealed" {
					if err := os.Rename(path, aside); err != nil {
						t.Fatal(err)
					}
				} else {
					n, _ := segment.ParseFileName(filepath.Base(segs[len(segs)-1]))
					path = filepath.Join(filepath.Dir(path), segment.FileName(n+1))
				}
				makeForeign(t, kind, path)
				fifos := []string{path}
				opts := Options{FS: vfs.Default, SegmentSize: 1024}
				indexDir := filepath.Join(dir, IndexDir)
				indexBefore, err := os.ReadDir(indexDir)
				if err != nil {
					t.Fatal(err)
				}

				// rebuild-index refuses, dry run or not, and drops nothing.
				for _, apply := range []bool{false, true} {
					rerr := within(t, "rebuild-index", fifos, func() error {
						_, err := RebuildIndex(ctx, dir, opts, apply)
						return err
					})
					wantCodeAt(t, fmt.Sprintf("rebuild-index apply=%v", apply), rerr, errs.CodeChainBroken, path)
				}
				if after, err := os.ReadDir(indexDir); err != nil || len(after) != len(indexBefore) {
					t.Fatalf("the index was touched by a refused rebuild: %d entries, %v", len(after), err)
				}

				// The index intact: Open, reads, verify, compaction, snapshot.
				db := openWithin(t, "Open", fifos, dir, opts)
				rerr := within(t, "read", fifos, func() error { _, err := db.Record(ctx, "a", 1); return err })
				if place == "sealed" {
					wantCodeAt(t, "read of seq 1", rerr, errs.CodeChainBroken, path)
				} else if rerr != nil {
					t.Fatalf("read of seq 1: %v", rerr)
				}
				if _, err := db.Get(ctx, []byte("b00")); err != nil {
					t.Fatalf("read of anchor b: %v", err)
				}
				rep := within(t, "verify", fifos, func() VerifyReport {
					rep, err := db.Verify(ctx, VerifyOptions{})
					if err != nil {
						t.Errorf("verify: %v; want findings, not an error", err)
					}
					return rep
				})
				if rep.OK || !hasFinding(rep, errs.CodeChainBroken, path) {
					t.Fatalf("verify: %+v; want an INT_002 finding at %s", rep.Failures, path)
				}
				cerr := within(t, "compact", fifos, func() error {
					_, err := db.Compact(ctx, snapshot.DefaultPolicy(), CompactOptions{})
					return err
				})
				if cerr != nil && errs.CodeOf(cerr) != errs.CodeChainBroken {
					t.Fatalf("compact: %v; want none or INT_002", cerr)
				}
				serr := within(t, "snapshot create", fifos, func() error { _, err := db.CreateSnapshot(ctx, ""); return err })
				if serr != nil && !errs.CodeOf(serr).IsIntegrity() {
					t.Fatalf("snapshot create: %v; want none or an integrity code", serr)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}

				// The index lost: the open that rebuilds it damages anchor
				// a (read-only) and reads nothing of the entry; b is whole.
				if err := os.RemoveAll(indexDir); err != nil {
					t.Fatal(err)
				}
				db = openWithin(t, "Open rebuilding the index", fifos, dir, opts)
				damaged := false
				for _, ev := range db.RecoveryReport().Events {
					if ev.Kind == EventDamaged && ev.Anchor == "a" && ev.Err != nil && ev.Err.Code == errs.CodeChainBroken && ev.File == path {
						damaged = true
					}
				}
				if !damaged {
					t.Fatalf("recovery %+v; want anchor a damaged (INT_002) at %s", db.RecoveryReport().Events, path)
				}
				if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); errs.CodeOf(err) != errs.CodeChainBroken {
					t.Fatalf("append to the damaged anchor: %v; want INT_002", err)
				}
				if v, err := db.Get(ctx, []byte("b02")); err != nil || string(v.Value) != "w" {
					t.Fatalf("read of anchor b: %+v %v", v, err)
				}
				rep = within(t, "verify", fifos, func() VerifyReport {
					rep, err := db.Verify(ctx, VerifyOptions{})
					if err != nil {
						t.Errorf("verify: %v", err)
					}
					return rep
				})
				if rep.OK || !hasFinding(rep, errs.CodeChainBroken, path) {
					t.Fatalf("verify: %+v; want an INT_002 finding at %s", rep.Failures, path)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}

				// Nothing was destroyed: with the entry gone (and the
				// segment back), a rebuild brings back every record.
				if _, err := os.Lstat(path); err != nil {
					t.Fatalf("the foreign entry is gone: %v", err)
				}
				if err := os.RemoveAll(path); err != nil {
					t.Fatal(err)
				}
				if place == "sealed" {
					if err := os.Rename(aside, path); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := RebuildIndex(ctx, dir, opts, true); err != nil {
					t.Fatalf("rebuild after the entry is gone: %v", err)
				}
				db, err = Open(dir, opts)
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
					t.Fatalf("verify after the entry is gone: %+v %v", rep.Failures, err)
				}
				for i := range 30 {
					if _, err := db.Get(ctx, fmt.Appendf(nil, "a%02d", i)); err != nil {
						t.Fatalf("a%02d: %v", i, err)
					}
				}
			})
		}
	}
}

// TestForeignJournalEntry: a journal file past the settle point that is not
// a regular file may hide acknowledged appends: Open refuses (INT_002)
// instead of hanging, and so does rebuild-index (which would replay every
// journal file). One older than the settle point is never read, and is
// left where it is (it is no file the journal wrote).
func TestForeignJournalEntry(t *testing.T) {
	ctx := context.Background()
	for _, kind := range foreignKinds {
		t.Run(kind, func(t *testing.T) {
			dir, _ := foreignDB(t)
			opts := Options{FS: vfs.Default, SegmentSize: 1024}
			jdir := filepath.Join(dir, JournalDir)
			gens, err := journal.List(vfs.Default, jdir)
			if err != nil || len(gens) == 0 {
				t.Fatalf("journal %v %v", gens, err)
			}
			newer := filepath.Join(jdir, journal.FileName(gens[len(gens)-1]+5))
			makeForeign(t, kind, newer)
			fifos := []string{newer}
			oerr := within(t, "Open", fifos, func() error {
				db, err := Open(dir, opts)
				if err == nil {
					_ = db.Close()
				}
				return err
			})
			wantCodeAt(t, "open", oerr, errs.CodeChainBroken, newer)
			rerr := within(t, "rebuild-index", fifos, func() error { _, err := RebuildIndex(ctx, dir, opts, true); return err })
			wantCodeAt(t, "rebuild-index", rerr, errs.CodeChainBroken, newer)
			if err := os.RemoveAll(newer); err != nil {
				t.Fatal(err)
			}

			// Older than the settle point: never read, never removed.
			older := filepath.Join(jdir, journal.FileName(1))
			if gens[0] == 1 {
				t.Fatalf("journal generations %v; want the first one gone", gens)
			}
			makeForeign(t, kind, older)
			db := openWithin(t, "Open", []string{older}, dir, opts)
			if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(older); err != nil {
				t.Fatalf("the foreign entry was removed: %v", err)
			}
			rerr = within(t, "rebuild-index", []string{older}, func() error { _, err := RebuildIndex(ctx, dir, opts, false); return err })
			wantCodeAt(t, "rebuild-index dry run", rerr, errs.CodeChainBroken, older)
		})
	}
}

// TestForeignTreeDirectories: a FIFO where a directory of the tree belongs
// (a fan-out directory, an anchor directory, snapshots/, checkpoints/,
// lost+found/) or where one of its single files belongs (audit.log,
// INDEX-CORRUPT, DBID). Nothing hangs; each is what its place calls for.
func TestForeignTreeDirectories(t *testing.T) {
	ctx := context.Background()
	type tc struct {
		name string
		path func(dir string) string
		// lostIndex removes the index first, so that Open lists the tree.
		lostIndex bool
		openCode  errs.Code // "" when Open succeeds
		finding   errs.Code // the verify finding at the path ("" for none)
	}
	anchorDir := func(dir string) string { return segment.AnchorDir(vfs.Default, dir, "a") }
	cases := []tc{
		{name: "fan-out directory", path: func(dir string) string { return filepath.Dir(anchorDir(dir)) }, lostIndex: true, finding: errs.CodeChainBroken},
		{name: "anchor directory", path: anchorDir, lostIndex: true, finding: errs.CodeChainBroken},
		{name: "anchor directory, index intact", path: anchorDir, finding: errs.CodeChainBroken},
		{name: "snapshots", path: func(dir string) string { return filepath.Join(dir, snapshot.DirName) }, finding: errs.CodeSnapshotCorrupted},
		{name: "checkpoints", path: func(dir string) string { return filepath.Join(dir, CheckpointsDir) }, finding: errs.CodeSignatureInvalid},
		{name: "lost+found", path: func(dir string) string { return filepath.Join(dir, LostAndFound) }},
		{name: "audit log", path: func(dir string) string { return filepath.Join(dir, AuditFile) }, finding: errs.CodeChainBroken},
		{name: "index corrupt marker", path: func(dir string) string { return filepath.Join(dir, IndexCorruptMarker) }},
		{name: "database id", path: func(dir string) string { return filepath.Join(dir, IDFile) }, openCode: errs.CodeInvalidInput},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, _ := foreignDB(t)
			opts := Options{FS: vfs.Default, SegmentSize: 1024}
			path := c.path(dir)
			if err := os.Rename(path, filepath.Join(filepath.Dir(dir), "aside")); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			if c.lostIndex {
				if err := os.RemoveAll(filepath.Join(dir, IndexDir)); err != nil {
					t.Fatal(err)
				}
			}
			makeForeign(t, "fifo", path)
			fifos := []string{path}
			if c.lostIndex {
				rerr := within(t, "rebuild-index", fifos, func() error { _, err := RebuildIndex(ctx, dir, opts, false); return err })
				wantCodeAt(t, "rebuild-index", rerr, errs.CodeChainBroken, path)
			}
			type opened struct {
				db  *DB
				err error
			}
			o := within(t, "Open", fifos, func() opened {
				db, err := Open(dir, opts)
				return opened{db, err}
			})
			if c.openCode != "" {
				wantCodeAt(t, "open", o.err, c.openCode, path)
				return
			}
			if o.err != nil {
				t.Fatalf("open: %v", o.err)
			}
			db := o.db
			defer db.Close()
			rep := within(t, "verify", fifos, func() VerifyReport {
				rep, err := db.Verify(ctx, VerifyOptions{})
				if err != nil {
					t.Errorf("verify: %v; want findings, not an error", err)
				}
				return rep
			})
			if c.finding != "" && !hasFinding(rep, c.finding, path) {
				t.Fatalf("verify: %+v; want a %s finding at %s", rep.Failures, c.finding, path)
			}
			if c.finding == "" && !rep.OK {
				t.Fatalf("verify: %+v; want none", rep.Failures)
			}
			_ = within(t, "snapshot list", fifos, func() error { _, err := db.Snapshots(ctx); return err })
			_ = within(t, "stats", fifos, func() error { _, err := db.Stats(ctx); return err })
			_ = within(t, "compact", fifos, func() error {
				_, err := db.Compact(ctx, snapshot.DefaultPolicy(), CompactOptions{})
				return err
			})
			_ = within(t, "snapshot create", fifos, func() error { _, err := db.CreateSnapshot(ctx, ""); return err })
		})
	}
}

// TestForeignLockFile: a lock file that is not a regular file is refused
// (IO_001: it holds nothing, and an operator removes it) before it is
// opened: the open of a FIFO for reading blocks, and O_CREATE through a
// dangling symbolic link created the link's target, wherever it pointed.
func TestForeignLockFile(t *testing.T) {
	for _, kind := range foreignKinds {
		t.Run(kind, func(t *testing.T) {
			dir, _ := foreignDB(t)
			path := filepath.Join(dir, lockFileName)
			if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			makeForeign(t, kind, path)
			err := within(t, "Open", []string{path}, func() error {
				db, err := Open(dir, Options{FS: vfs.Default})
				if err == nil {
					_ = db.Close()
				}
				return err
			})
			wantCodeAt(t, "open", err, errs.CodeWriteFailed, path)
			if _, err := os.Lstat(filepath.Join(dir, "nowhere")); !os.IsNotExist(err) {
				t.Fatalf("the dangling link's target was created: %v", err)
			}
			if err := os.RemoveAll(path); err != nil {
				t.Fatal(err)
			}
			db, err := Open(dir, Options{FS: vfs.Default})
			if err != nil {
				t.Fatal(err)
			}
			_ = db.Close()
		})
	}
}
