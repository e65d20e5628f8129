//go:build !unix

package engine

import (
	"io"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// lockDir takes the database's write lock through vfs.FS.Lock.
func lockDir(fs vfs.FS, dir string) (io.Closer, error) {
	c, err := fs.Lock(fs.PathJoin(dir, lockFileName))
	if err != nil {
		return nil, errs.Wrap(errs.CodeScopeLocked, err, "database %s is open for writing elsewhere", dir)
	}
	return c, nil
}
