package engine

import (
	"errors"
	"io"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// readOnlyFS is the filesystem of a read-only open (Options.ReadOnly) as
// the index sees it: every call that would create, change or remove
// anything fails with errReadOnlyFS, and a file opened for reading refuses
// writes and syncs. Pebble opened with ReadOnly writes nothing of its own
// accord; this makes sure of it. Its Lock takes no lock: Pebble's lock
// file would be created (and, on the OS filesystem, opened for writing),
// and the database's own shared lock (readLockDir) keeps writers out.
type readOnlyFS struct{ fs vfs.FS }

// errReadOnlyFS is what a read-only open's filesystem answers a write with.
var errReadOnlyFS = errors.New("the database is open read-only: nothing is written")

func refused(op, path string) error { return &os.PathError{Op: op, Path: path, Err: errReadOnlyFS} }

var _ vfs.FS = readOnlyFS{}

func (r readOnlyFS) Create(name string, _ vfs.DiskWriteCategory) (vfs.File, error) {
	return nil, refused("create", name)
}
func (r readOnlyFS) Link(oldname, _ string) error { return refused("link", oldname) }
func (r readOnlyFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := r.fs.Open(name, opts...)
	if err != nil {
		return nil, err
	}
	return readOnlyFile{File: f, name: name}, nil
}
func (r readOnlyFS) OpenReadWrite(name string, _ vfs.DiskWriteCategory, _ ...vfs.OpenOption) (vfs.File, error) {
	return nil, refused("open for writing", name)
}
func (r readOnlyFS) OpenDir(name string) (vfs.File, error) {
	f, err := r.fs.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return readOnlyFile{File: f, name: name}, nil
}
func (r readOnlyFS) Remove(name string) error                 { return refused("remove", name) }
func (r readOnlyFS) RemoveAll(name string) error              { return refused("remove", name) }
func (r readOnlyFS) Rename(oldname, _ string) error           { return refused("rename", oldname) }
func (r readOnlyFS) MkdirAll(dir string, _ os.FileMode) error { return refused("mkdir", dir) }
func (r readOnlyFS) ReuseForWrite(oldname, _ string, _ vfs.DiskWriteCategory) (vfs.File, error) {
	return nil, refused("reuse for writing", oldname)
}
func (r readOnlyFS) Lock(string) (io.Closer, error) {
	return closerFunc(func() error { return nil }), nil
}
func (r readOnlyFS) List(dir string) ([]string, error)      { return r.fs.List(dir) }
func (r readOnlyFS) Stat(name string) (vfs.FileInfo, error) { return r.fs.Stat(name) }
func (r readOnlyFS) PathBase(path string) string            { return r.fs.PathBase(path) }
func (r readOnlyFS) PathJoin(elem ...string) string         { return r.fs.PathJoin(elem...) }
func (r readOnlyFS) PathDir(path string) string             { return r.fs.PathDir(path) }
func (r readOnlyFS) GetDiskUsage(path string) (vfs.DiskUsage, error) {
	return r.fs.GetDiskUsage(path)
}

// Unwrap gives the filesystem underneath, so vfs.Root still finds the OS
// filesystem (fsutil asks os.Lstat there).
func (r readOnlyFS) Unwrap() vfs.FS { return r.fs }

// readOnlyFile is a file opened through readOnlyFS: reads pass, writes and
// syncs fail.
type readOnlyFile struct {
	vfs.File
	name string
}

func (f readOnlyFile) Write([]byte) (int, error)          { return 0, refused("write", f.name) }
func (f readOnlyFile) WriteAt([]byte, int64) (int, error) { return 0, refused("write", f.name) }
func (f readOnlyFile) Preallocate(int64, int64) error     { return refused("preallocate", f.name) }
func (f readOnlyFile) Sync() error                        { return refused("sync", f.name) }
func (f readOnlyFile) SyncData() error                    { return refused("sync", f.name) }
func (f readOnlyFile) SyncTo(int64) (bool, error)         { return false, refused("sync", f.name) }
