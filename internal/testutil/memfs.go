package testutil

import (
	"io"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// cloneMu orders MemFS.Lock against CrashClone. Pebble's MemFS.Lock
// read-locks the MemFS's clone mutex and then read-locks it again inside
// its Create; a CrashClone between the two waits for the first read lock
// and, waiting, blocks the second (Go's RWMutex lets no new reader past a
// waiting writer). Every test that clones from a write hook while a Pebble
// store opens on the same MemFS (verify's scratch store, a snapshot
// replay's) could deadlock so: engine's TestCompactCrashAtEveryWrite hung
// twice in a few dozen runs without it. Clones and locks taken through
// CrashClone and LockOrdered never overlap.
var cloneMu sync.Mutex

// CrashClone is mem.CrashClone(cfg), never inside a MemFS.Lock taken
// through LockOrdered.
func CrashClone(mem *vfs.MemFS, cfg vfs.CrashCloneCfg) *vfs.MemFS {
	cloneMu.Lock()
	defer cloneMu.Unlock()
	return mem.CrashClone(cfg)
}

// LockOrdered wraps fs so its Lock never overlaps a CrashClone. It goes
// under any wrapper whose hooks clone (errorfs.Wrap(LockOrdered(mem), inj)):
// a hook run from inside the Lock would wait for itself.
func LockOrdered(fs vfs.FS) vfs.FS { return lockOrderedFS{fs} }

type lockOrderedFS struct{ vfs.FS }

func (fs lockOrderedFS) Lock(name string) (io.Closer, error) {
	cloneMu.Lock()
	defer cloneMu.Unlock()
	return fs.FS.Lock(name)
}

// Unwrap lets code that looks through wrappers see the MemFS.
func (fs lockOrderedFS) Unwrap() vfs.FS { return fs.FS }
