//go:build !unix

package engine

import (
	"io"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// lockDir takes the database's write lock through vfs.FS.Lock.
func lockDir(fs vfs.FS, dir string) (io.Closer, error) {
	path := fs.PathJoin(dir, lockFileName)
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

// readLockDir is the lock of a read-only open: without a shared lock in
// vfs.FS, only this process's own opens are seen.
func readLockDir(fs vfs.FS, dir string) (io.Closer, string, error) {
	release, holder := procReader(fs, fs.PathJoin(dir, lockFileName))
	if holder != "" {
		return nil, holder, nil
	}
	return closerFunc(func() error { release(); return nil }), "", nil
}
