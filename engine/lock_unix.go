//go:build unix

package engine

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// lockDir takes the database's write lock (SPEC §3): an fcntl lock on
// dir/LOCK, which the kernel drops when the process dies, so no stale lock
// survives a crash. On the real filesystem a refused lock names the holder's
// pid, read with F_GETLK rather than from the file (which a racing opener
// could have rewritten); a holder with a shared lock is a read-only open
// (readLockDir). Other filesystems (tests) use vfs.FS.Lock.
func lockDir(fs vfs.FS, dir string) (io.Closer, error) {
	path := fs.PathJoin(dir, lockFileName)
	if fs != vfs.Default {
		release, err := procWriter(fs, path, dir)
		if err != nil {
			return nil, err
		}
		c, err := fs.Lock(path)
		if err != nil {
			release()
			return nil, errs.Wrap(errs.CodeScopeLocked, err, "database %s is open for writing elsewhere", dir)
		}
		return closerFunc(func() error { err := c.Close(); release(); return err }), nil
	}
	// fcntl locks belong to the process, so a second open in this process
	// would be granted (and a read-only open's would turn the write lock
	// into a shared one): keep our own registry too.
	release, err := procWriter(fs, canonicalPath(path), dir)
	if err != nil {
		return nil, err
	}
	// NB: looked at before it is opened. A FIFO's open for reading (the
	// holder's pid, below) blocks, a directory fails the open, and O_CREATE
	// through a dangling symbolic link would create its target, wherever
	// it points (fsutil.Regular tells such a link from no file here, on
	// the OS filesystem). The lock file holds nothing: anything but a
	// regular file (or a link to one) is for an operator to remove (IO_001,
	// exit 2).
	if _, err := fsutil.Regular(fs, path, false); err != nil {
		if !oserrorIsNotExist(err) {
			release()
			return nil, errs.Wrap(errs.CodeWriteFailed, err, "lock file (remove it: it holds nothing)")
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		release()
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "open lock file")
	}
	spec := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &spec); err != nil {
		holder, shared := lockHolder(f, path)
		f.Close()
		release()
		if shared {
			return nil, errs.Wrap(errs.CodeScopeLocked, err, "database %s is open read-only by %s: it can be opened for writing once that reader is done", dir, holder)
		}
		return nil, errs.Wrap(errs.CodeScopeLocked, err, "database %s is open for writing by %s", dir, holder)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(fmt.Sprintf("%d\n", os.Getpid())), 0)
	}
	return lockFile{f: f, release: release}, nil
}

// lockHolder names the process holding a lock on f ("pid N") and reports
// whether its lock is a shared one (a read-only open's).
func lockHolder(f *os.File, path string) (string, bool) {
	probe := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart}
	if syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &probe) == nil && probe.Type != syscall.F_UNLCK {
		return "pid " + strconv.Itoa(int(probe.Pid)), probe.Type == syscall.F_RDLCK
	}
	if b, rerr := os.ReadFile(path); rerr == nil && strings.TrimSpace(string(b)) != "" {
		return "pid " + strings.TrimSpace(string(b)), false
	}
	return "another process", false
}

// readLockDir is the lock of a read-only open (Options.ReadOnly): it
// creates and writes nothing. When dir/LOCK exists it takes a shared fcntl
// lock on it, opened for reading only, so that no process opens the
// database for writing (and changes the index under the reader) while the
// reader holds it. When a writer holds the database, no lock is taken and
// writer names it ("pid N"): the reader then goes without the index. A
// missing LOCK (a copy made without it) is no lock: nothing to hold, and
// nothing is created. Other filesystems than the OS's have no shared lock:
// there only this process's own opens are seen.
func readLockDir(fs vfs.FS, dir string) (c io.Closer, writer string, err error) {
	path := fs.PathJoin(dir, lockFileName)
	if fs != vfs.Default {
		release, holder := procReader(fs, path)
		if holder != "" {
			return nil, holder, nil
		}
		return closerFunc(func() error { release(); return nil }), "", nil
	}
	abs := canonicalPath(path)
	procMu.Lock()
	defer procMu.Unlock()
	if pl := procFind(fs, abs); pl != nil {
		if pl.writer {
			return nil, fmt.Sprintf("this process (pid %d)", os.Getpid()), nil
		}
		pl.readers++
		return pl.readCloser(), "", nil
	}
	pl := &procLock{fs: fs, path: abs, readers: 1}
	// NB: only a regular file is opened (a FIFO's open blocks); anything
	// else, or none, holds no lock and is left as it is.
	if _, err := fsutil.Regular(fs, path, false); err == nil {
		f, err := os.Open(path)
		if err != nil && !oserrorIsNotExist(err) {
			return nil, "", errs.Wrap(errs.CodeWriteFailed, err, "open lock file %s for reading", path)
		}
		if err == nil {
			spec := syscall.Flock_t{Type: syscall.F_RDLCK, Whence: io.SeekStart}
			if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &spec); err != nil {
				holder, _ := lockHolder(f, path)
				f.Close()
				return nil, holder, nil
			}
			pl.file = f
		}
	}
	procAdd(pl)
	return pl.readCloser(), "", nil
}

// canonicalPath names the lock file at path as the registry knows it: an
// absolute path with the database directory's symbolic links resolved, so
// that two spellings of one database (relative, through a link) are one.
func canonicalPath(path string) string {
	dir, name := filepath.Split(path)
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	if abs, err := filepath.Abs(filepath.Join(dir, name)); err == nil {
		return abs
	}
	return path
}

type lockFile struct {
	f       *os.File
	release func()
}

// Close releases the lock (closing the descriptor drops fcntl locks).
func (l lockFile) Close() error {
	err := l.f.Close()
	l.release()
	return err
}
