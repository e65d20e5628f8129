// Package fsutil holds the checks anchordb makes, through a vfs.FS, on an
// entry of a directory tree before it opens it: the tree of the database
// itself (anchors/, journal/, snapshots/, checkpoints/, the audit log, the
// id file) and the tree an ingest reads from.
//
// NB: the open of a FIFO for reading blocks until a writer comes, with no
// context to end it and no signal that reaches it, and the open of a
// directory succeeds and only its reads fail (as an I/O error, which says
// nothing of what is wrong). O_NONBLOCK cannot be passed through vfs.FS, so
// an entry is looked at (Stat, which follows a symbolic link) before it is
// opened or listed: a file to be read must be a regular file, a directory to
// be listed a directory. What else is found is an *EntryError, which the
// caller turns into the finding its place calls for (INT_002 for a segment,
// INT_003 for a snapshot, INPUT_001 in an ingest's source, …). A swap between
// the look and the open is not guarded against: the check is against
// foreign entries, not against an adversary who can write the directory.
//
// NB: vfs.FS has no Lstat, and Stat through a symbolic link to nothing
// says "does not exist": a dangling link read as an absent entry, and what
// then created the entry wrote through the link (creating its target,
// wherever it pointed) or over it. A name a listing gave is known to be
// there; for one looked up by name (DBID, audit.log, a segment the index
// names), when the FS is the OS filesystem (vfs.Root is vfs.Default, so a
// wrapper such as errorfs that passes paths through counts), os.Lstat
// tells a link to nothing from no entry. Other vfs.FS implementations
// cannot be asked: there a dangling link, if the FS has links at all,
// still reads as absent (vfs.MemFS has none).
package fsutil

import (
	"errors"
	"io/fs"
	"os"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// EntryError says that an entry of a directory tree is not what its place
// needs: not a regular file (a FIFO, a socket, a device, a directory), not a
// directory, or a symbolic link to nothing.
type EntryError struct {
	Path string
	// What completes "Path is …": "not a regular file (p---------)",
	// "not a directory (p---------)", "a dangling symbolic link (or removed
	// since it was listed)".
	What string
}

func (e *EntryError) Error() string { return e.Path + " is " + e.What }

// IsEntryError reports whether err (or a cause of it) is an *EntryError.
func IsEntryError(err error) bool {
	var e *EntryError
	return errors.As(err, &e)
}

// Dangling is EntryError.What for a name a listing gave and Stat no longer
// finds: a symbolic link to nothing, or an entry removed in between.
const Dangling = "a dangling symbolic link (or removed since it was listed)"

func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || os.IsNotExist(err)
}

// Regular returns the FileInfo of path when it is a regular file or a
// symbolic link to one. Anything else is an *EntryError; so is a missing
// path when listed says its name came from a listing of its directory (it
// was there: a link to nothing, or removed since), or when it is a
// symbolic link to nothing on the OS filesystem (see IsDanglingLink).
// Otherwise a missing path is Stat's not-exist error, and any other failure
// of Stat is returned as it is (an I/O error, not a finding).
func Regular(fs vfs.FS, path string, listed bool) (os.FileInfo, error) {
	st, err := fs.Stat(path)
	switch {
	case err == nil && st.Mode().IsRegular():
		return st, nil
	case err == nil:
		return nil, &EntryError{Path: path, What: "not a regular file (" + st.Mode().Type().String() + ")"}
	case listed && isNotExist(err):
		return nil, &EntryError{Path: path, What: Dangling}
	case isNotExist(err) && IsDanglingLink(fs, path):
		return nil, &EntryError{Path: path, What: DanglingLink}
	}
	return nil, underNonDir(path, err)
}

// DanglingLink is EntryError.What for a name Lstat finds to be a symbolic
// link that Stat cannot follow.
const DanglingLink = "a dangling symbolic link"

// IsDanglingLink reports whether path is a symbolic link that leads
// nowhere, when fs is the OS filesystem (vfs.Root(fs) is vfs.Default). For
// any other FS it reports false: vfs.FS has no Lstat to ask.
func IsDanglingLink(fs vfs.FS, path string) bool {
	if vfs.Root(fs) != vfs.Default {
		return false
	}
	st, err := os.Lstat(path)
	if err != nil || st.Mode()&os.ModeSymlink == 0 {
		return false
	}
	// A link whose target appeared since the caller's Stat is no longer
	// dangling: it is then what the target is, for the caller to find.
	_, err = os.Stat(path)
	return isNotExist(err)
}

// underNonDir turns ENOTDIR from Stat — a component of path above it is
// not a directory (a FIFO where a directory of the tree belongs) — into an
// *EntryError; any other error is returned as it is.
func underNonDir(path string, err error) error {
	if errors.Is(err, syscall.ENOTDIR) {
		return &EntryError{Path: path, What: "under a path that is not a directory"}
	}
	return err
}

// Open opens path for reading once Regular(fs, path, listed) has found it a
// regular file: never a FIFO, whose open would block. A listed path removed
// between the Stat and the open is Dangling, as one removed before the Stat
// is: a reader beside a writer meets both (a truncation removes a segment
// the reader listed).
func Open(fs vfs.FS, path string, listed bool) (vfs.File, error) {
	if _, err := Regular(fs, path, listed); err != nil {
		return nil, err
	}
	f, err := fs.Open(path)
	if err != nil && listed && isNotExist(err) {
		return nil, &EntryError{Path: path, What: Dangling}
	}
	return f, err
}

// Dir returns nil when dir is a directory (or a symbolic link to one), an
// *EntryError when it is anything else (a symbolic link to nothing on the
// OS filesystem included, see IsDanglingLink), and Stat's error, not-exist
// included, when Stat fails.
func Dir(fs vfs.FS, dir string) error {
	st, err := fs.Stat(dir)
	if isNotExist(err) && IsDanglingLink(fs, dir) {
		return &EntryError{Path: dir, What: DanglingLink}
	}
	if err != nil {
		return underNonDir(dir, err)
	}
	if !st.IsDir() {
		what := "a regular file"
		if !st.Mode().IsRegular() {
			what = st.Mode().Type().String()
		}
		return &EntryError{Path: dir, What: "not a directory (" + what + ")"}
	}
	return nil
}

// List lists dir unless Dir finds it is not a directory (an *EntryError):
// the list of a FIFO opens it, and blocks. When Stat fails otherwise (a
// missing dir), fs.List is left to fail as it does.
func List(fs vfs.FS, dir string) ([]string, error) {
	if err := Dir(fs, dir); IsEntryError(err) {
		return nil, err
	}
	return fs.List(dir)
}
