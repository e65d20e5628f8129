// Package scratch is the engine's throwaway storage: Pebble stores without
// a WAL, and directories, that live as long as one operation (a snapshot's
// replay, a verification, an ingest, a rebuild from a snapshot) and hold
// nothing any state depends on.
//
// They go under the database's tmp directory (Dir), which every open for
// writing removes whole (RemoveAll), so a process that ends before an
// operation cleans up leaves nothing behind for long; a read-only open,
// which writes nothing under the database, puts its stores outside it
// (OpenOutside). RowSpill and HashSet are the two collections an operation
// keeps in memory up to a bound and in a store past it, so that its memory
// does not grow with the database or with a source's log.
package scratch

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	iofs "io/fs"
	"os"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Dir is the directory under the database's that holds scratch stores and
// directories (docs/FORMAT.md: tmp/<purpose>-<16 hex>/).
const Dir = "tmp"

// Store is a scratch Pebble store. Close closes it and removes its
// directory.
type Store struct {
	*pebble.DB
	purpose string
	fs      vfs.FS
	dir     string
}

// Opener opens a scratch store for purpose: the engine's opens one under
// the database's Dir or, read-only, outside the database.
type Opener func(purpose string) (*Store, error)

// Open opens a scratch store, without a WAL, in a directory of its own
// under root's Dir, named for purpose and a random tag.
func Open(fs vfs.FS, root, purpose string, log pebble.Logger) (*Store, error) {
	dir := tempName(fs, root, purpose)
	db, err := pebble.Open(dir, &pebble.Options{FS: fs, DisableWAL: true, Logger: log})
	if err != nil {
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "open %s store", purpose)
	}
	return &Store{DB: db, purpose: purpose, fs: fs, dir: dir}, nil
}

// OpenOutside is Open for a read-only open: the store goes to the system's
// temporary directory when fs is the operating system's, and to memory
// otherwise, never under the database directory.
func OpenOutside(fs vfs.FS, purpose string, log pebble.Logger) (*Store, error) {
	sfs, dir := vfs.FS(vfs.NewMem()), "scratch"
	if vfs.Root(fs) == vfs.Default {
		d, err := os.MkdirTemp("", "anchordb-"+purpose+"-")
		if err != nil {
			return nil, errs.Wrap(errs.CodeWriteFailed, err, "create a scratch directory for %s", purpose)
		}
		sfs, dir = vfs.Default, d
	}
	db, err := pebble.Open(dir, &pebble.Options{FS: sfs, DisableWAL: true, Logger: log})
	if err != nil {
		if sfs == vfs.Default {
			_ = os.RemoveAll(dir)
		}
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "open %s store", purpose)
	}
	return &Store{DB: db, purpose: purpose, fs: sfs, dir: dir}, nil
}

// Purpose is the purpose the store was opened for.
func (s *Store) Purpose() string { return s.purpose }

// Close closes the store and removes its directory. Nothing in it is worth
// an error: the next open for writing removes whatever is left.
func (s *Store) Close() {
	_ = s.DB.Close()
	_ = s.fs.RemoveAll(s.dir)
}

// MkdirTemp creates a directory of its own under root's Dir, named for
// purpose and a random tag, and returns its path; the caller removes it.
func MkdirTemp(fs vfs.FS, root, purpose string) (string, error) {
	dir := tempName(fs, root, purpose)
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return "", errs.Wrap(errs.CodeWriteFailed, err, "create %s", dir)
	}
	return dir, nil
}

// RemoveAll removes root's Dir and everything in it: what operations of an
// earlier process left behind. Only the holder of the database's write
// lock may call it.
func RemoveAll(fs vfs.FS, root string) error {
	if err := fs.RemoveAll(fs.PathJoin(root, Dir)); err != nil && !os.IsNotExist(err) && !errors.Is(err, iofs.ErrNotExist) {
		return errs.Wrap(errs.CodeWriteFailed, err, "remove scratch directory")
	}
	return nil
}

// tempName is root/Dir/purpose-<16 hex>, the hex a random 8-byte tag.
func tempName(fs vfs.FS, root, purpose string) string {
	var tag [8]byte
	_, _ = rand.Read(tag[:])
	return fs.PathJoin(root, Dir, purpose+"-"+hex.EncodeToString(tag[:]))
}
