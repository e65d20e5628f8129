package engine

import (
	"container/list"
	"errors"
	"sync"

	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// fileCache bounds the segment files held open. Entries are reference
// counted: a file in use is never closed under its user, and the least
// recently used idle files are closed when the cache is over capacity. The
// cache never syncs: durability comes from settle, which fsyncs through its
// own handles (an fsync covers the inode, whichever descriptor wrote).
type fileCache struct {
	fs       vfs.FS
	capacity int

	mu      sync.Mutex
	entries map[string]*cachedFile
	lru     list.List // of *cachedFile; front = most recently used
}

type cachedFile struct {
	path     string
	file     vfs.File
	writable bool
	refs     int
	elem     *list.Element
	dead     bool // removed from the map; close when refs reach 0
}

func newFileCache(fs vfs.FS, capacity int) *fileCache {
	return &fileCache{fs: fs, capacity: capacity, entries: make(map[string]*cachedFile)}
}

// acquire returns the open file at path, opening it if needed. With writable
// the file is opened read-write (and created if create is set); a read-only
// handle already cached is replaced. Callers must release what they acquire.
func (c *fileCache) acquire(path string, writable, create bool) (*cachedFile, error) {
	c.mu.Lock()
	if cf, ok := c.entries[path]; ok && (cf.writable || !writable) {
		cf.refs++
		c.lru.MoveToFront(cf.elem)
		c.mu.Unlock()
		return cf, nil
	}
	c.mu.Unlock()

	// Open outside the lock: it may touch the disk.
	f, err := c.openFile(path, writable, create)
	if err != nil && isFDPressure(err) && c.closeIdle() > 0 {
		// No descriptor left: the idle files give theirs back.
		f, err = c.openFile(path, writable, create)
	}
	if err != nil {
		return nil, err
	}
	cf := &cachedFile{path: path, file: f, writable: writable || create, refs: 1}

	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.entries[path]; ok {
		if old.writable || !cf.writable {
			// Someone opened it meanwhile; use theirs.
			old.refs++
			c.lru.MoveToFront(old.elem)
			_ = f.Close()
			return old, nil
		}
		c.removeLocked(old)
	}
	cf.elem = c.lru.PushFront(cf)
	c.entries[path] = cf
	c.evictLocked()
	return cf, nil
}

// openFile opens path as acquire asks.
func (c *fileCache) openFile(path string, writable, create bool) (f vfs.File, err error) {
	switch {
	case create:
		f, err = c.fs.Create(path, vfs.WriteCategoryUnspecified)
	case writable:
		// NB: Stat first: OpenReadWrite would create a missing file, and a
		// FIFO is never opened (an *fsutil.EntryError).
		if _, err = fsutil.Regular(c.fs, path, false); err == nil {
			f, err = c.fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
		}
	default:
		// NB: the open of a FIFO for reading blocks, with no context to end
		// it: a segment that is not a regular file is an
		// *fsutil.EntryError, never opened.
		f, err = fsutil.Open(c.fs, path, false)
	}
	return f, err
}

// closeIdle closes every cached file no one is using and returns how many
// it closed: the descriptors go back to the process.
func (c *fileCache) closeIdle() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for e := c.lru.Back(); e != nil; {
		cf := e.Value.(*cachedFile)
		prev := e.Prev()
		if cf.refs == 0 {
			c.removeLocked(cf)
			n++
		}
		e = prev
	}
	return n
}

func (c *fileCache) release(cf *cachedFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cf.refs--
	if cf.refs == 0 && cf.dead {
		_ = cf.file.Close()
		return
	}
	c.evictLocked()
}

// forget drops path from the cache (closing it once idle), e.g. after a seal
// or when recovery rewrites the file.
func (c *fileCache) forget(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cf, ok := c.entries[path]; ok {
		c.removeLocked(cf)
	}
}

func (c *fileCache) removeLocked(cf *cachedFile) {
	delete(c.entries, cf.path)
	c.lru.Remove(cf.elem)
	cf.dead = true
	if cf.refs == 0 {
		_ = cf.file.Close()
	}
}

func (c *fileCache) evictLocked() {
	for e := c.lru.Back(); e != nil && len(c.entries) > c.capacity; {
		cf := e.Value.(*cachedFile)
		prev := e.Prev()
		if cf.refs == 0 {
			c.removeLocked(cf)
		}
		e = prev
	}
}

// close closes every file. In-use files are closed when released.
func (c *fileCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	for _, cf := range c.entries {
		delete(c.entries, cf.path)
		c.lru.Remove(cf.elem)
		cf.dead = true
		if cf.refs == 0 {
			err = errors.Join(err, cf.file.Close())
		}
	}
	return err
}

// open returns the number of open files, for stats and tests.
func (c *fileCache) open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
