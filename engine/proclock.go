package engine

import (
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The databases this process has open, by lock file: fcntl locks belong to
// a process, so the OS grants a second lock in the same process (and
// closing any descriptor of the file drops them all); and a vfs.FS other
// than the OS's (tests) has no shared lock at all. So the engine keeps its
// own record: one writer, or any number of read-only opens, per lock file.

var (
	procMu   sync.Mutex
	procHeld = map[string][]*procLock{} // by path; one per filesystem
)

// procLock is what this process holds on one lock file.
type procLock struct {
	fs      vfs.FS
	path    string
	writer  bool
	readers int
	file    *os.File // the readers' descriptor with the shared lock (OS filesystem)
}

// sameFS compares two filesystems; one whose dynamic type cannot be
// compared is only ever the same as itself by identity, which == would
// panic to find out.
func sameFS(a, b vfs.FS) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// procFind returns the record of path on fs, or nil. procMu is held.
func procFind(fs vfs.FS, path string) *procLock {
	for _, pl := range procHeld[path] {
		if sameFS(pl.fs, fs) {
			return pl
		}
	}
	return nil
}

// procAdd records pl. procMu is held.
func procAdd(pl *procLock) { procHeld[pl.path] = append(procHeld[pl.path], pl) }

// procRemove forgets pl. procMu is held.
func procRemove(pl *procLock) {
	list := procHeld[pl.path]
	for i, x := range list {
		if x == pl {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(procHeld, pl.path)
	} else {
		procHeld[pl.path] = list
	}
}

// procWriter records a write open of the database whose lock file is path
// on fs, refusing one (STATE_001) while this process has it open in any
// way. release forgets it.
func procWriter(fs vfs.FS, path, dir string) (release func(), err error) {
	procMu.Lock()
	defer procMu.Unlock()
	if pl := procFind(fs, path); pl != nil {
		if pl.writer {
			return nil, errs.New(errs.CodeScopeLocked, "database %s is open for writing by this process (pid %d)", dir, os.Getpid())
		}
		return nil, errs.New(errs.CodeScopeLocked, "database %s is open read-only by this process (pid %d): it can be opened for writing once that reader is closed", dir, os.Getpid())
	}
	pl := &procLock{fs: fs, path: path, writer: true}
	procAdd(pl)
	return func() {
		procMu.Lock()
		procRemove(pl)
		procMu.Unlock()
	}, nil
}

// procReader records a read-only open on a filesystem without shared
// locks. holder names this process when it has the database open for
// writing (no record is made then).
func procReader(fs vfs.FS, path string) (release func(), holder string) {
	procMu.Lock()
	defer procMu.Unlock()
	pl := procFind(fs, path)
	if pl != nil && pl.writer {
		return nil, fmt.Sprintf("this process (pid %d)", os.Getpid())
	}
	if pl == nil {
		pl = &procLock{fs: fs, path: path}
		procAdd(pl)
	}
	pl.readers++
	return pl.leaveReader, ""
}

// readCloser is one reader's hold on pl: its Close leaves.
func (pl *procLock) readCloser() io.Closer {
	var once sync.Once
	return closerFunc(func() error {
		once.Do(pl.leaveReader)
		return nil
	})
}

// leaveReader ends one reader's hold; the last one closes the descriptor
// that holds the shared lock.
func (pl *procLock) leaveReader() {
	procMu.Lock()
	defer procMu.Unlock()
	pl.readers--
	if pl.readers > 0 {
		return
	}
	if pl.file != nil {
		_ = pl.file.Close()
		pl.file = nil
	}
	procRemove(pl)
}

// closerFunc is an io.Closer made of a function.
type closerFunc func() error

// Close calls the function.
func (f closerFunc) Close() error { return f() }
