//go:build !unix

package main

import (
	"errors"
	"os"
)

// writableDir cannot ask the system without writing: an open for writing
// that is refused falls back to a read-only one (isPermission).
func writableDir(string) bool { return true }

// isPermission reports whether err is the refusal of a write by the
// filesystem.
func isPermission(err error) bool { return errors.Is(err, os.ErrPermission) }
