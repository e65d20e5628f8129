package engine

import (
	"errors"
	"slices"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A command that writes opens its database creating it if need be, and may
// then fail before it writes anything: an ingest whose source is refused,
// an import whose input is. It must leave nothing behind (SPEC §9), not an
// empty database where there was none; Discard removes one. Only what this
// Open created goes, and only while the write lock is still held, so a
// database another process opens in the same directory afterwards is never
// touched.

// lockFileName is the write lock's file under the database root.
const lockFileName = "LOCK"

// freshNames are the entries of a database Open created before anything was
// appended to it: the lock, the id file, the index and the journal.
var freshNames = []string{lockFileName, IDFile, IndexDir, JournalDir}

// creation is what an Open that created the database made.
type creation struct {
	dirs []string // directories it made, the database root first
	lock bool     // it created the lock file
}

// missingDirs returns dir and those of its parents that do not exist, dir
// first: what mkdirAllSynced will make.
func missingDirs(fs vfs.FS, dir string) []string {
	var out []string
	for p := dir; ; p = fs.PathDir(p) {
		if _, err := fs.Stat(p); err == nil || !errorsIsNotExist(err) {
			return out
		}
		out = append(out, p)
		if fs.PathDir(p) == p {
			return out
		}
	}
}

// Discard closes the database as Close does and, when this Open created it
// (its directory held nothing else) and not one record was appended since,
// removes it: the files Open made, then the directories it made. It keeps
// a database that existed before, one that took any record, one whose
// writes failed, and one whose directory holds anything Open did not make;
// it then only closes it. removed says whether the database is gone.
func (db *DB) Discard() (removed bool, err error) {
	if !db.closed.CompareAndSwap(false, true) {
		return false, errClosed
	}
	err = db.shut()
	c := db.created
	if err == nil && c != nil && db.failed.Load() == nil && db.metrics.records.Load() == 0 {
		removed, err = db.removeCreated(c)
	}
	err = errors.Join(err, ioErr(db.lock.Close(), "release lock"))
	if removed {
		// The lock is gone with its file: a directory still empty is
		// ours. One that is not (another process made something there
		// since) stays, as do its parents.
		for _, d := range c.dirs {
			if db.fs.Remove(d) != nil {
				break
			}
		}
	}
	return removed, err
}

// removeCreated removes the files of a database Open created, under its
// lock, when they are all its directory holds.
func (db *DB) removeCreated(c *creation) (bool, error) {
	names, err := db.fs.List(db.dir)
	if err != nil {
		return false, errs.Wrap(errs.CodeWriteFailed, err, "list %s", db.dir)
	}
	for _, n := range names {
		if !slices.Contains(freshNames, n) {
			return false, nil
		}
	}
	// The id file first: from then on the directory is no database.
	for _, n := range []string{IDFile, JournalDir, IndexDir} {
		if err := db.fs.RemoveAll(db.fs.PathJoin(db.dir, n)); err != nil {
			return false, errs.Wrap(errs.CodeWriteFailed, err, "remove the unused new database's %s", n)
		}
	}
	if c.lock {
		// NB: removed while still held, so no other process takes a lock
		// on a file that is about to go.
		if err := db.fs.Remove(db.fs.PathJoin(db.dir, lockFileName)); err != nil && !errorsIsNotExist(err) {
			return true, errs.Wrap(errs.CodeWriteFailed, err, "remove the unused new database's lock file")
		}
	}
	return true, nil
}
