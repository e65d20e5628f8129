//go:build unix

package main

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"

	"github.com/anchordb/anchordb/engine"
)

// writableDir reports whether this process may write the database in dir:
// the directory itself and, when it is there, its lock file (access(2),
// which also says no on a read-only mount).
func writableDir(dir string) bool {
	const wOK = 2
	if syscall.Access(dir, wOK) != nil {
		return false
	}
	lock := filepath.Join(dir, "LOCK")
	if _, err := os.Stat(lock); err == nil && syscall.Access(lock, wOK) != nil {
		return false
	}
	for _, sub := range []string{engine.IndexDir, engine.JournalDir} {
		p := filepath.Join(dir, sub)
		if st, err := os.Stat(p); err == nil && st.IsDir() && syscall.Access(p, wOK) != nil {
			return false
		}
	}
	return true
}

// isPermission reports whether err is the refusal of a write by the
// filesystem: no permission, or a read-only filesystem.
func isPermission(err error) bool {
	return errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EROFS)
}
