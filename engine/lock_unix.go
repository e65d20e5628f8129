//go:build unix

package engine

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// lockDir takes the database's write lock (SPEC §3): an fcntl lock on
// dir/LOCK, which the kernel drops when the process dies, so no stale lock
// survives a crash. On the real filesystem a refused lock names the holder's
// pid, read with F_GETLK rather than from the file (which a racing opener
// could have rewritten). Other filesystems (tests) use vfs.FS.Lock.
func lockDir(fs vfs.FS, dir string) (io.Closer, error) {
	path := fs.PathJoin(dir, lockFileName)
	if fs != vfs.Default {
		c, err := fs.Lock(path)
		if err != nil {
			return nil, errs.Wrap(errs.CodeScopeLocked, err, "database %s is open for writing elsewhere", dir)
		}
		return c, nil
	}
	// fcntl locks belong to the process, so a second open in this process
	// would be granted: keep our own registry too.
	abs, aerr := filepathAbs(path)
	if aerr != nil {
		abs = path
	}
	if _, busy := heldLocks.LoadOrStore(abs, true); busy {
		return nil, errs.New(errs.CodeScopeLocked, "database %s is open for writing by this process (pid %d)", dir, os.Getpid())
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
			heldLocks.Delete(abs)
			return nil, errs.Wrap(errs.CodeWriteFailed, err, "lock file (remove it: it holds nothing)")
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		heldLocks.Delete(abs)
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "open lock file")
	}
	spec := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &spec); err != nil {
		holder := "another process"
		probe := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart}
		if syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &probe) == nil && probe.Type != syscall.F_UNLCK {
			holder = "pid " + strconv.Itoa(int(probe.Pid))
		} else if b, rerr := os.ReadFile(path); rerr == nil && strings.TrimSpace(string(b)) != "" {
			holder = "pid " + strings.TrimSpace(string(b))
		}
		f.Close()
		heldLocks.Delete(abs)
		e := errs.Wrap(errs.CodeScopeLocked, err, "database %s is open for writing by %s", dir, holder)
		return nil, e
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(fmt.Sprintf("%d\n", os.Getpid())), 0)
	}
	return lockFile{f: f, abs: abs}, nil
}

var heldLocks sync.Map

var filepathAbs = filepath.Abs

type lockFile struct {
	f   *os.File
	abs string
}

// Close releases the lock (closing the descriptor drops fcntl locks).
func (l lockFile) Close() error {
	err := l.f.Close()
	heldLocks.Delete(l.abs)
	return err
}
