package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/journal"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// The second try of an Open that moved an unreadable index aside (db.go).
// The cases came from a review of the first version, which carried the
// retry in Options: each failed there.

// newestJournalSize is the size of the newest journal file of db's directory.
func newestJournalSize(t *testing.T, fs vfs.FS) int64 {
	t.Helper()
	gens, err := journal.List(fs, "db/journal")
	if err != nil || len(gens) == 0 {
		t.Fatalf("journal files: %v %v", gens, err)
	}
	st, err := fs.Stat(fs.PathJoin("db/journal", journal.FileName(gens[len(gens)-1])))
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestIndexRetryKeepsOptions: the second try opens with the caller's
// options (journal preallocation turned off stayed off), and DB.Options
// carries nothing of the retry, so an Open with them neither reports an
// index_unreadable event that did not happen nor turns preallocation on.
func TestIndexRetryKeepsOptions(t *testing.T) {
	mem, _, manifest := closedWithManifest(t)
	if err := mem.Remove(manifest); err != nil {
		t.Fatal(err)
	}
	opts := crashOptions(mem, false)
	opts.JournalPrealloc = -1
	db := mustOpen(t, mem, opts)
	if !db.RecoveryReport().Rebuilt {
		t.Fatalf("no rebuild: %+v", db.RecoveryReport())
	}
	ctx := context.Background()
	if _, err := db.Put(ctx, "p", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	// Preallocation would keep at least 64 KiB of zeros past the blocks.
	if n := newestJournalSize(t, mem); n >= 64<<10 {
		t.Errorf("journal preallocation turned off, yet the journal file is %d bytes after the retry", n)
	}
	again := db.Options()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = mustOpen(t, mem, again)
	defer db.Close()
	for _, ev := range db.RecoveryReport().Events {
		if ev.Kind == EventIndexUnreadable {
			t.Fatalf("an Open with DB.Options of a healthy index reports %v", ev)
		}
	}
	if _, err := db.Put(ctx, "p", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if n := newestJournalSize(t, mem); n >= 64<<10 {
		t.Errorf("an Open with DB.Options turned journal preallocation on: the journal file is %d bytes", n)
	}
}

// TestIndexMoveAsideFailureIsIO: a failure to move the unreadable index
// aside is an I/O failure (IO_001, SPEC §8), not an integrity finding.
func TestIndexMoveAsideFailureIsIO(t *testing.T) {
	mem, _, manifest := closedWithManifest(t)
	if err := mem.Remove(manifest); err != nil {
		t.Fatal(err)
	}
	failed := errors.New("injected rename failure")
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpRename && op.Path == "db/index" {
			return failed
		}
		return nil
	})
	_, err := Open("db", crashOptions(errorfs.Wrap(testutil.LockOrdered(mem), inj), false))
	if !errors.Is(err, failed) {
		t.Fatalf("want the rename failure, got %v", err)
	}
	if c := CodeOf(err); c != errs.CodeWriteFailed {
		t.Fatalf("a failed rename (I/O) is reported as %s: %v", c, err)
	}
}

type recordingLogger struct {
	mu            sync.Mutex
	infos, errors []string
}

func (l *recordingLogger) Infof(f string, a ...any) {
	l.mu.Lock()
	l.infos = append(l.infos, fmt.Sprintf(f, a...))
	l.mu.Unlock()
}
func (l *recordingLogger) Errorf(f string, a ...any) {
	l.mu.Lock()
	l.errors = append(l.errors, fmt.Sprintf(f, a...))
	l.mu.Unlock()
}

// TestIndexRetryLogsNoStoppedWrites: a corrupt block met during Open is
// Open's to handle; the database a second try returns takes writes, and
// nothing logged that writes stopped.
func TestIndexRetryLogsNoStoppedWrites(t *testing.T) {
	mem, _, _ := closedWithManifest(t)
	spoilTables(t, mem)
	log := &recordingLogger{}
	opts := crashOptions(mem, false)
	opts.Logger = log
	db := mustOpen(t, mem, opts)
	defer db.Close()
	if _, err := db.Put(context.Background(), "x", []byte("k"), []byte("v")); err != nil {
		t.Fatalf("write after the rebuild: %v", err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, e := range log.errors {
		if strings.Contains(e, "stopped accepting writes") {
			t.Fatalf("Open succeeded and writes work, but the log says: %s", e)
		}
	}
}

// TestOpenGate: a corruption Pebble reports before the database serves is
// kept for Open (which moves the index aside) instead of stopping writes,
// and so is one while that database closes; once a database serves, it
// stops writes.
func TestOpenGate(t *testing.T) {
	db := &DB{opts: Options{Logger: nopLogger{}}}
	info := pebble.DataCorruptionInfo{Path: "db/index/000007.sst", Details: errors.New("block checksum mismatch")}
	if !db.corruptionDuringOpen(info) || !db.corruptionDuringOpen(info) {
		t.Fatal("a corruption during Open was not held for it")
	}
	err := db.serve()
	if !errors.Is(err, errIndexUnreadable) || CodeOf(err) != errs.CodeIndexMismatch || !strings.Contains(err.Error(), "000007.sst") {
		t.Fatalf("serve after a corruption: %v", err)
	}
	if db.failed.Load() != nil {
		t.Fatalf("a corruption during Open stopped writes: %v", db.failed.Load())
	}
	// That database is not served: a report while it closes is held too.
	if !db.corruptionDuringOpen(info) {
		t.Fatal("a corruption after a failed serve was not held")
	}
	// A database served: reports are no longer held.
	ok := &DB{opts: Options{Logger: nopLogger{}}}
	if err := ok.serve(); err != nil {
		t.Fatal(err)
	}
	if ok.corruptionDuringOpen(info) {
		t.Fatal("a corruption after Open was held")
	}
}

// spoilAfterCutFS corrupts every read of the index's tables once recovery
// has created a file in lost+found (a cut), until the index is moved.
type spoilAfterCutFS struct {
	vfs.FS
	on, moved atomic.Bool
}

type spoilFile struct {
	vfs.File
	fs *spoilAfterCutFS
}

func (f spoilFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	if f.fs.on.Load() && !f.fs.moved.Load() {
		for i := 0; i < n; i += 7 {
			p[i] ^= 0xFF
		}
	}
	return n, err
}

func (s *spoilAfterCutFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := s.FS.Open(name, opts...)
	if err != nil || !strings.HasPrefix(name, "db/index/") || !strings.HasSuffix(name, ".sst") {
		return f, err
	}
	return spoilFile{f, s}, nil
}

func (s *spoilAfterCutFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if strings.HasPrefix(name, "db/"+LostAndFound+"/") {
		s.on.Store(true)
	}
	return s.FS.Create(name, c)
}

func (s *spoilAfterCutFS) Rename(a, b string) error {
	if a == "db/index" {
		s.moved.Store(true)
	}
	return s.FS.Rename(a, b)
}

// TestIndexRetryReportsFirstTryCuts: SPEC §3 says a torn tail cut at open
// is reported. When the first try cuts a tail and then meets a corrupt
// index block, the second try finds the tail cut already; the report must
// still say so.
func TestIndexRetryReportsFirstTryCuts(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	db := mustOpen(t, mem, crashOptions(mem, false))
	var anchors []string
	for i := 0; i < 400; i++ {
		an := fmt.Sprintf("anchor-%03d", i)
		anchors = append(anchors, an)
		if _, err := db.Put(ctx, an, []byte("k"), []byte(strings.Repeat("v", 40))); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = mustOpen(t, mem, crashOptions(mem, false))
	unclean := testutil.CrashClone(mem, vfs.CrashCloneCfg{})
	_ = db.Close()

	// The anchor recovery reconciles first gets a torn tail (2 bytes), so
	// the cut comes before the index's tables are read much.
	sort.Slice(anchors, func(i, j int) bool {
		return segment.AnchorDir(unclean, "db", anchors[i]) < segment.AnchorDir(unclean, "db", anchors[j])
	})
	segs := testutil.SegmentFiles(t, unclean, "db", anchors[0])
	newest := segs[len(segs)-1]
	patchFile(t, unclean, newest, func(b []byte) []byte { return append(b, 0x01, 0x02) })

	fs := &spoilAfterCutFS{FS: unclean}
	db = mustOpen(t, fs, crashOptions(fs, false))
	defer db.Close()
	rep := db.RecoveryReport()
	unreadable, cut := false, false
	for _, ev := range rep.Events {
		unreadable = unreadable || ev.Kind == EventIndexUnreadable
		cut = cut || (ev.Kind == EventCut && ev.File == newest)
	}
	if !fs.on.Load() || !unreadable {
		t.Fatalf("the scenario did not happen (a cut %v, the index unreadable %v): %v", fs.on.Load(), unreadable, rep.Events)
	}
	if !cut {
		t.Fatalf("the tail of %s was cut but the report after the retry does not say so: %v", newest, rep.Events)
	}
}

// TestIndexMovedAsideTwiceWithOneClock: an index moved aside never lands on
// one moved before, even when the clock names both alike.
func TestIndexMovedAsideTwiceWithOneClock(t *testing.T) {
	mem, _, manifest := closedWithManifest(t)
	opts := crashOptions(mem, false)
	opts.Clock = func() time.Time { return time.Unix(1_700_000_000, 0) }
	for round := 0; round < 2; round++ {
		if err := mem.Remove(manifest); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		db := mustOpen(t, mem, opts)
		if !db.RecoveryReport().Rebuilt {
			t.Fatalf("round %d: no rebuild", round)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		manifest = manifestOf(t, mem)
	}
	names, err := mem.List("db/" + LostAndFound)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range names {
		if strings.HasPrefix(name, IndexDir+"-") {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("want two moved indexes in lost+found, got %q", names)
	}
}

// lockWatchFS records whether the database's write lock was released.
type lockWatchFS struct {
	vfs.FS
	released atomic.Bool
}

type watchedLock struct {
	io.Closer
	fs *lockWatchFS
}

func (l watchedLock) Close() error {
	l.fs.released.Store(true)
	return l.Closer.Close()
}

func (w *lockWatchFS) Lock(name string) (io.Closer, error) {
	c, err := w.FS.Lock(name)
	if err != nil || name != "db/LOCK" { // not the index's own (Pebble's)
		return c, err
	}
	return watchedLock{c, w}, nil
}

// TestIndexRetryHoldsTheLock: the write lock is held from the first try to
// the end of the second, so no other process opens the database between
// the index's move and its rebuild.
func TestIndexRetryHoldsTheLock(t *testing.T) {
	mem, _, manifest := closedWithManifest(t)
	if err := mem.Remove(manifest); err != nil {
		t.Fatal(err)
	}
	fs := &lockWatchFS{FS: mem}
	db := mustOpen(t, fs, crashOptions(fs, false))
	if !db.RecoveryReport().Rebuilt {
		t.Fatalf("no rebuild: %+v", db.RecoveryReport())
	}
	if fs.released.Load() {
		t.Fatal("Open released the write lock between its two tries")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if !fs.released.Load() {
		t.Fatal("Close did not release the lock (the watcher sees nothing)")
	}
}

// corruptionOnJournalCreate returns base wrapped, and options for it, such
// that Pebble's DataCorruption event is raised — as for a background read
// (table stats, a compaction) that met a bad block — when an Open first
// creates a journal file.
func corruptionOnJournalCreate(base vfs.FS) (vfs.FS, Options) {
	var handler atomic.Pointer[func(pebble.DataCorruptionInfo)]
	var fired atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpCreate && strings.HasPrefix(op.Path, "db/journal/") && fired.CompareAndSwap(false, true) {
			(*handler.Load())(pebble.DataCorruptionInfo{Path: "db/index/000012.sst", Details: errors.New("block checksum mismatch")})
		}
		return nil
	})
	fs := errorfs.Wrap(base, inj)
	o := crashOptions(fs, false)
	o.PebbleOptions = func(po *pebble.Options) {
		h := po.EventListener.DataCorruption
		handler.Store(&h)
	}
	return fs, o
}
