package engine

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// faultFS is a vfs.FS over a crashable MemFS that fails the operations its
// injector picks, like errorfs, and then does what a real disk or kernel may
// do with the failure — which errorfs does not (STYLE.md, "Crash and fault
// testing"):
//
//   - faultDropUnsynced: a failed fsync of a file loses the data that was
//     unsynced at that moment for good (Linux marks the dirty pages clean
//     after a failed writeback: the fsyncgate lesson). A later fsync that
//     succeeds does not bring it back. The loss shows in the states
//     returned by crashState; the live MemFS still serves the data, as a
//     page cache would until it evicts it.
//   - faultTornWrite: a failed write writes a prefix of the buffer and
//     returns an error.
//   - faultGarbage: a failed write leaves the first sector (up to 512 bytes)
//     of its range filled with garbage and returns an error.
//
// faultPlain only returns the error, exactly as errorfs does.
type faultFS struct {
	mem  *vfs.MemFS
	inj  errorfs.Injector
	mode faultMode

	mu       sync.Mutex
	fired    []errorfs.Op
	poisoned map[string]*poison
}

type faultMode int

const (
	faultPlain faultMode = iota
	faultDropUnsynced
	faultTornWrite
	faultGarbage
)

func (m faultMode) String() string {
	switch m {
	case faultPlain:
		return "plain"
	case faultDropUnsynced:
		return "drop-unsynced"
	case faultTornWrite:
		return "torn-write"
	case faultGarbage:
		return "garbage"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// poison is what a failed fsync of one file lost: the bytes that differed
// from the durable content at that moment (lost[i]), unless written again
// since.
type poison struct {
	durable []byte
	lost    []bool
}

func newFaultFS(mem *vfs.MemFS, inj errorfs.Injector, mode faultMode) *faultFS {
	return &faultFS{mem: mem, inj: inj, mode: mode, poisoned: make(map[string]*poison)}
}

var _ vfs.FS = (*faultFS)(nil)

// maybe asks the injector about op and records the failures it injects.
func (fs *faultFS) maybe(op errorfs.Op) error {
	if fs.inj == nil {
		return nil
	}
	err := fs.inj.MaybeError(op)
	if err != nil {
		fs.mu.Lock()
		fs.fired = append(fs.fired, op)
		fs.mu.Unlock()
	}
	return err
}

// Fired returns the operations that failed.
func (fs *faultFS) Fired() []errorfs.Op {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return slices.Clone(fs.fired)
}

// forget drops what is known about path when a new file takes its place.
func (fs *faultFS) forget(path string) {
	fs.mu.Lock()
	delete(fs.poisoned, path)
	fs.mu.Unlock()
}

// rewritten notes that [off, off+n) of path holds new data again.
func (fs *faultFS) rewritten(path string, off int64, n int) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	p := fs.poisoned[path]
	if p == nil {
		return
	}
	for i := off; i < off+int64(n) && i < int64(len(p.lost)); i++ {
		p.lost[i] = false
	}
}

// poisonFile records that an fsync of path failed now.
func (fs *faultFS) poisonFile(path string) {
	durable, _ := testutil.ReadFile(testutil.CrashClone(fs.mem, vfs.CrashCloneCfg{}), path)
	live, err := testutil.ReadFile(fs.mem, path)
	if err != nil {
		return
	}
	lost := make([]bool, len(live))
	for i := range live {
		lost[i] = i >= len(durable) || live[i] != durable[i]
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if old := fs.poisoned[path]; old != nil {
		// An earlier failure's losses stand; add this one's.
		for i := range lost {
			if i < len(old.lost) && old.lost[i] {
				lost[i] = true
			}
		}
		if len(old.lost) > len(lost) {
			lost = append(lost, old.lost[len(lost):]...)
		}
	}
	fs.poisoned[path] = &poison{durable: durable, lost: lost}
}

// crashState returns the filesystem after a crash now: every synced byte and
// directory entry, each unsynced 4 KiB block and entry with probability pct
// (100: a process crash that loses nothing unsynced; 0: a power loss) — and
// in either case without the data a failed fsync lost.
func (fs *faultFS) crashState(pct int, seed uint64) *vfs.MemFS {
	cfg := vfs.CrashCloneCfg{UnsyncedDataPercent: pct}
	if pct > 0 && pct < 100 {
		cfg.RNG = newRand(seed)
	} else if pct == 100 {
		cfg.RNG = newRand(seed) // unused draws: every block is kept
	}
	clone := testutil.CrashClone(fs.mem, cfg)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	paths := make([]string, 0, len(fs.poisoned))
	for p := range fs.poisoned {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, path := range paths {
		p := fs.poisoned[path]
		cur, err := testutil.ReadFile(clone, path)
		if err != nil {
			continue // the file did not survive at all
		}
		out := slices.Clone(cur)
		for i := 0; i < len(p.lost) && i < len(out); i++ {
			if !p.lost[i] {
				continue
			}
			if i < len(p.durable) {
				out[i] = p.durable[i]
			} else {
				out[i] = 0
			}
		}
		end := len(out)
		for end > len(p.durable) && end-1 < len(p.lost) && p.lost[end-1] {
			end--
		}
		out = out[:end]
		if !bytes.Equal(out, cur) {
			testutil.WriteFile(clone, path, out)
		}
	}
	return clone
}

// Create implements vfs.FS.
func (fs *faultFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.maybe(errorfs.Op{Kind: errorfs.OpCreate, Path: name}); err != nil {
		return nil, err
	}
	f, err := fs.mem.Create(name, category)
	if err != nil {
		return nil, err
	}
	fs.forget(name)
	return &faultFile{fs: fs, path: name, f: f}, nil
}

// Link implements vfs.FS.
func (fs *faultFS) Link(oldname, newname string) error {
	if err := fs.maybe(errorfs.Op{Kind: errorfs.OpLink, Path: oldname}); err != nil {
		return err
	}
	fs.forget(newname)
	return fs.mem.Link(oldname, newname)
}

// Open implements vfs.FS.
func (fs *faultFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	if err := fs.maybe(errorfs.Op{Kind: errorfs.OpOpen, Path: name}); err != nil {
		return nil, err
	}
	f, err := fs.mem.Open(name)
	if err != nil {
		return nil, err
	}
	ff := &faultFile{fs: fs, path: name, f: f}
	for _, o := range opts {
		o.Apply(ff)
	}
	return ff, nil
}

// OpenReadWrite implements vfs.FS.
func (fs *faultFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	if err := fs.maybe(errorfs.Op{Kind: errorfs.OpOpen, Path: name}); err != nil {
		return nil, err
	}
	f, err := fs.mem.OpenReadWrite(name, category)
	if err != nil {
		return nil, err
	}
	ff := &faultFile{fs: fs, path: name, f: f}
	for _, o := range opts {
		o.Apply(ff)
	}
	return ff, nil
}

// OpenDir implements vfs.FS.
func (fs *faultFS) OpenDir(name string) (vfs.File, error) {
	if err := fs.maybe(errorfs.Op{Kind: errorfs.OpOpenDir, Path: name}); err != nil {
		return nil, err
	}
	f, err := fs.mem.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return &faultFile{fs: fs, path: name, f: f, dir: true}, nil
}

// Remove implements vfs.FS.
func (fs *faultFS) Remove(name string) error {
	if _, err := fs.mem.Stat(name); os.IsNotExist(err) || errorsIsNotExist(err) {
		return fs.mem.Remove(name)
	}
	if err := fs.maybe(errorfs.Op{Kind: errorfs.OpRemove, Path: name}); err != nil {
		return err
	}
	fs.forget(name)
	return fs.mem.Remove(name)
}

// RemoveAll implements vfs.FS.
func (fs *faultFS) RemoveAll(name string) error {
	if err := fs.maybe(errorfs.Op{Kind: errorfs.OpRemoveAll, Path: name}); err != nil {
		return err
	}
	fs.mu.Lock()
	for p := range fs.poisoned {
		if p == name || strings.HasPrefix(p, name+"/") {
			delete(fs.poisoned, p)
		}
	}
	fs.mu.Unlock()
	return fs.mem.RemoveAll(name)
}

// Rename implements vfs.FS.
func (fs *faultFS) Rename(oldname, newname string) error {
	if err := fs.maybe(errorfs.Op{Kind: errorfs.OpRename, Path: oldname}); err != nil {
		return err
	}
	if err := fs.mem.Rename(oldname, newname); err != nil {
		return err
	}
	fs.mu.Lock()
	p := fs.poisoned[oldname]
	delete(fs.poisoned, oldname)
	delete(fs.poisoned, newname)
	if p != nil {
		fs.poisoned[newname] = p
	}
	fs.mu.Unlock()
	return nil
}

// ReuseForWrite implements vfs.FS.
func (fs *faultFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.maybe(errorfs.Op{Kind: errorfs.OpReuseForWrite, Path: oldname}); err != nil {
		return nil, err
	}
	f, err := fs.mem.ReuseForWrite(oldname, newname, category)
	if err != nil {
		return nil, err
	}
	fs.forget(oldname)
	fs.forget(newname)
	return &faultFile{fs: fs, path: newname, f: f}, nil
}

// MkdirAll implements vfs.FS.
func (fs *faultFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := fs.maybe(errorfs.Op{Kind: errorfs.OpMkdirAll, Path: dir}); err != nil {
		return err
	}
	return fs.mem.MkdirAll(dir, perm)
}

// Lock implements vfs.FS.
func (fs *faultFS) Lock(name string) (io.Closer, error) {
	if err := fs.maybe(errorfs.Op{Kind: errorfs.OpLock, Path: name}); err != nil {
		return nil, err
	}
	return testutil.LockOrdered(fs.mem).Lock(name)
}

// List implements vfs.FS.
func (fs *faultFS) List(dir string) ([]string, error) {
	if err := fs.maybe(errorfs.Op{Kind: errorfs.OpList, Path: dir}); err != nil {
		return nil, err
	}
	return fs.mem.List(dir)
}

// Stat implements vfs.FS.
func (fs *faultFS) Stat(name string) (vfs.FileInfo, error) {
	if err := fs.maybe(errorfs.Op{Kind: errorfs.OpStat, Path: name}); err != nil {
		return nil, err
	}
	return fs.mem.Stat(name)
}

// GetDiskUsage implements vfs.FS.
func (fs *faultFS) GetDiskUsage(path string) (vfs.DiskUsage, error) {
	if err := fs.maybe(errorfs.Op{Kind: errorfs.OpGetDiskUsage, Path: path}); err != nil {
		return vfs.DiskUsage{}, err
	}
	return fs.mem.GetDiskUsage(path)
}

func (fs *faultFS) PathBase(p string) string       { return fs.mem.PathBase(p) }
func (fs *faultFS) PathJoin(elem ...string) string { return fs.mem.PathJoin(elem...) }
func (fs *faultFS) PathDir(p string) string        { return fs.mem.PathDir(p) }
func (fs *faultFS) Unwrap() vfs.FS                 { return fs.mem }
func (fs *faultFS) String() string                 { return "faultFS(" + fs.mode.String() + ")" }

func newRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// faultFile is a file of a faultFS.
type faultFile struct {
	fs   *faultFS
	path string
	f    vfs.File
	dir  bool
	pos  int64 // for Write: where the next sequential write lands
}

// Close never fails: it is not an injection point (as in errorfs).
func (f *faultFile) Close() error { return f.f.Close() }

func (f *faultFile) Read(p []byte) (int, error) {
	if err := f.fs.maybe(errorfs.Op{Kind: errorfs.OpFileRead, Path: f.path}); err != nil {
		return 0, err
	}
	return f.f.Read(p)
}

func (f *faultFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.maybe(errorfs.Op{Kind: errorfs.OpFileReadAt, Path: f.path, Offset: off}); err != nil {
		return 0, err
	}
	return f.f.ReadAt(p, off)
}

// damaged returns what a failed write of p leaves on the medium, or nil for
// nothing at all.
func (f *faultFile) damaged(p []byte) []byte {
	switch f.fs.mode {
	case faultTornWrite:
		if len(p) < 2 {
			return nil
		}
		return slices.Clone(p[:len(p)/2])
	case faultGarbage:
		g := slices.Clone(p)
		n := min(len(g), 512)
		x := uint32(len(p))*2654435761 + 12345
		for i := 0; i < n; i++ {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			g[i] = byte(x)
		}
		return g
	}
	return nil
}

func (f *faultFile) Write(p []byte) (int, error) {
	if err := f.fs.maybe(errorfs.Op{Kind: errorfs.OpFileWrite, Path: f.path, Offset: f.pos}); err != nil {
		d := f.damaged(p)
		if d == nil {
			return 0, err
		}
		n, _ := f.f.Write(d)
		f.fs.rewritten(f.path, f.pos, n)
		f.pos += int64(n)
		return n, err
	}
	n, err := f.f.Write(p)
	f.fs.rewritten(f.path, f.pos, n)
	f.pos += int64(n)
	return n, err
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.maybe(errorfs.Op{Kind: errorfs.OpFileWriteAt, Path: f.path, Offset: off}); err != nil {
		d := f.damaged(p)
		if d == nil {
			return 0, err
		}
		n, _ := f.f.WriteAt(d, off)
		f.fs.rewritten(f.path, off, n)
		if n == len(p) {
			n = 0 // the caller must not believe any of it landed
		}
		return n, err
	}
	n, err := f.f.WriteAt(p, off)
	f.fs.rewritten(f.path, off, n)
	return n, err
}

func (f *faultFile) Preallocate(offset, length int64) error {
	if err := f.fs.maybe(errorfs.Op{Kind: errorfs.OpFilePreallocate, Path: f.path}); err != nil {
		return err
	}
	return f.f.Preallocate(offset, length)
}

func (f *faultFile) Stat() (vfs.FileInfo, error) {
	if err := f.fs.maybe(errorfs.Op{Kind: errorfs.OpFileStat, Path: f.path}); err != nil {
		return nil, err
	}
	return f.f.Stat()
}

func (f *faultFile) syncFailed(err error) error {
	if f.fs.mode == faultDropUnsynced && !f.dir {
		f.fs.poisonFile(f.path)
	}
	return err
}

func (f *faultFile) Sync() error {
	if err := f.fs.maybe(errorfs.Op{Kind: errorfs.OpFileSync, Path: f.path}); err != nil {
		return f.syncFailed(err)
	}
	return f.f.Sync()
}

func (f *faultFile) SyncData() error {
	if err := f.fs.maybe(errorfs.Op{Kind: errorfs.OpFileSyncData, Path: f.path}); err != nil {
		return f.syncFailed(err)
	}
	return f.f.SyncData()
}

func (f *faultFile) SyncTo(length int64) (bool, error) {
	if err := f.fs.maybe(errorfs.Op{Kind: errorfs.OpFileSyncTo, Path: f.path}); err != nil {
		return false, f.syncFailed(err)
	}
	return f.f.SyncTo(length)
}

func (f *faultFile) Prefetch(offset, length int64) error { return f.f.Prefetch(offset, length) }
func (f *faultFile) Fd() uintptr                         { return f.f.Fd() }

// TestFaultFS checks the wrapper itself: a failed fsync loses the data it
// should have made durable even when a later fsync succeeds, a torn write
// leaves a prefix, a garbage write leaves garbage.
func TestFaultFS(t *testing.T) {
	var failNext atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failNext.Load() && op.Kind != errorfs.OpOpenDir && op.Kind != errorfs.OpCreate {
			failNext.Store(false)
			return errorfs.ErrInjected
		}
		return nil
	})
	write := func(t *testing.T, fs vfs.FS, f vfs.File, s string, off int64, fail bool) error {
		t.Helper()
		failNext.Store(fail)
		_, err := f.WriteAt([]byte(s), off)
		return err
	}
	t.Run("drop unsynced", func(t *testing.T) {
		mem := vfs.NewCrashableMem()
		fs := newFaultFS(mem, inj, faultDropUnsynced)
		if err := mkdirAllSynced(fs, "d"); err != nil {
			t.Fatal(err)
		}
		f, err := fs.Create("d/f", vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if err := write(t, fs, f, "AAAA", 0, false); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		d, _ := fs.OpenDir("d")
		_ = d.Sync()
		_ = d.Close()
		if err := write(t, fs, f, "BBBB", 4, false); err != nil {
			t.Fatal(err)
		}
		failNext.Store(true)
		if err := f.Sync(); err == nil {
			t.Fatal("injected fsync failure did not fail")
		}
		// The retry succeeds — and must not make BBBB durable.
		if err := write(t, fs, f, "CC", 8, false); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		live, _ := testutil.ReadFile(mem, "d/f")
		if string(live) != "AAAABBBBCC" {
			t.Fatalf("live content %q: the page cache still serves what it failed to write", live)
		}
		for _, pct := range []int{0, 100} {
			got, err := testutil.ReadFile(fs.crashState(pct, 1), "d/f")
			if err != nil || string(got) != "AAAA\x00\x00\x00\x00CC" {
				t.Fatalf("after a crash (%d%% of unsynced data kept): %q %v; want the dropped bytes gone", pct, got, err)
			}
		}
	})
	t.Run("torn write", func(t *testing.T) {
		mem := vfs.NewCrashableMem()
		fs := newFaultFS(mem, inj, faultTornWrite)
		f, _ := fs.Create("f", vfs.WriteCategoryUnspecified)
		if err := write(t, fs, f, "0123456789", 0, true); err == nil {
			t.Fatal("no error")
		}
		if got, _ := testutil.ReadFile(mem, "f"); string(got) != "01234" {
			t.Fatalf("torn write left %q", got)
		}
	})
	t.Run("garbage", func(t *testing.T) {
		mem := vfs.NewCrashableMem()
		fs := newFaultFS(mem, inj, faultGarbage)
		f, _ := fs.Create("f", vfs.WriteCategoryUnspecified)
		want := strings.Repeat("x", 600)
		if err := write(t, fs, f, want, 0, true); err == nil {
			t.Fatal("no error")
		}
		got, _ := testutil.ReadFile(mem, "f")
		if len(got) != 600 || string(got[:512]) == want[:512] || string(got[512:]) != want[512:] {
			t.Fatalf("garbage write left %q", got)
		}
	})
}
