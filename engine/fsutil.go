package engine

import (
	"errors"
	"io"
	"io/fs"
	"os"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/cockroachdb/pebble/v2/vfs"
)

func errorsIsNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, os.ErrNotExist)
}

var errEOF = io.EOF

// mkdirAllSynced creates dir and any missing parents, then fsyncs every
// parent up to the closest one that already existed, so the new entries
// survive a power loss (as Pebble does for its own directory).
func mkdirAllSynced(fs vfs.FS, dir string) error {
	var parents []string
	for p := fs.PathDir(dir); ; p = fs.PathDir(p) {
		parents = append(parents, p)
		if fs.PathDir(p) == p {
			break
		}
		if _, err := fs.Stat(p); err == nil {
			break
		} else if !errorsIsNotExist(err) {
			return err
		}
	}
	if _, err := fs.Stat(dir); err == nil {
		return nil
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range parents {
		d, err := fs.OpenDir(p)
		if err != nil {
			return err
		}
		err = d.Sync()
		if cerr := d.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// ioErr wraps an I/O error (nil stays nil) as IO_001 unless it already
// carries a code.
func ioErr(err error, what string) error {
	if err == nil || errs.CodeOf(err) != "" {
		return err
	}
	return errs.Wrap(errs.CodeWriteFailed, err, "%s", what)
}

// syncDirOf fsyncs directory dir of fs, as IO_001 on failure: what makes a
// rename or removal in it durable.
func syncDirOf(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err == nil {
		err = errors.Join(d.Sync(), d.Close())
	}
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "fsync directory %s", dir)
	}
	return nil
}

// entryErr turns what fsutil.Regular, Open, Dir or List returned into a
// coded error: an *fsutil.EntryError (a FIFO, a directory, a dangling link
// where a file of the database's own tree belongs) is the finding code of
// its place, located at the entry; any other failure is IO_001, what being
// the action that failed. nil stays nil.
func entryErr(err error, code errs.Code, what string) error {
	if err == nil {
		return nil
	}
	var ee *fsutil.EntryError
	if errors.As(err, &ee) {
		e := errs.New(code, "%s", ee.Error())
		e.File = ee.Path
		return e
	}
	return ioErr(err, what)
}

// checkIsDir refuses a database directory that is something else — a
// regular file, or a path under one — with INPUT_001: the path is wrong,
// and an I/O error about the lock file under it would send the operator
// after the wrong thing. A path that does not exist yet is fine. Open asks
// only once creating or locking the directory failed, so an Open that
// succeeds makes no call more.
func checkIsDir(fs vfs.FS, dir string) error {
	st, err := fs.Stat(dir)
	switch {
	case err == nil && !st.IsDir():
		return errs.New(errs.CodeInvalidInput, "database directory %s is not a directory", dir)
	case err == nil:
		return nil
	}
	// Missing, or under a file: the nearest ancestor that exists says.
	for p := dir; ; {
		parent := fs.PathDir(p)
		if parent == p || parent == "" || parent == "." {
			return nil
		}
		p = parent
		if st, err := fs.Stat(p); err == nil {
			if !st.IsDir() {
				return errs.New(errs.CodeInvalidInput, "database directory %s is not a directory: %s is a file", dir, p)
			}
			return nil
		}
	}
}
