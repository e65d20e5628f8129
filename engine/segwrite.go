package engine

import (
	"github.com/anchordb/anchordb/internal/errs"
)

// Segment writes.
//
// A record is durable once its journal block is; its segment bytes only need
// to reach the file before they are read, sealed or settled. So the applier
// appends each group's frames to a per-anchor buffer and writes a buffer out
// when it grows past segBufferFlush, when its segment is sealed, when a
// reader needs bytes still in it, when all buffers together pass
// segBufferLimit, and at every settle. Each anchor then costs one write per
// 64 KiB rather than one per commit group.

const (
	segBufferFlush = 64 << 10
	segBufferLimit = 32 << 20
)

// segBuffer is an anchor's pending segment bytes. It is guarded by the
// anchor's wmu: the applier fills it, readers and settles may flush it.
type segBuffer struct {
	segno  uint64
	off    int64 // file offset of buf[0]
	buf    []byte
	create bool // the file does not exist yet; buf opens with its header
	// failed is set when writing buf out failed. What the failed write left
	// in [off, off+len(buf)) of the file is unknown — nothing, a prefix,
	// garbage — so those bytes are never read as records (a reader gets
	// IO_001, not a corrupt frame) and never written again: the engine has
	// stopped writing.
	failed error
}

// bufferSegments hands the group's segment bytes to the anchors' buffers.
// It runs in the applier, in journal order.
func (g *group) bufferSegments() error {
	db := g.db
	for _, p := range g.order {
		for i := range p.writes {
			w := &p.writes[i]
			if len(w.buf) == 0 {
				continue
			}
			if err := db.bufferWrite(p.a, w); err != nil {
				return err
			}
		}
	}
	if db.buffered.Load() > segBufferLimit {
		return db.flushAllBuffers()
	}
	return nil
}

func (db *DB) bufferWrite(a *anchor, w *segWrite) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	sb := &a.wbuf
	if len(sb.buf) > 0 && (sb.segno != w.segno || sb.off+int64(len(sb.buf)) != w.offset) {
		if err := db.flushBufferLocked(a); err != nil {
			return err
		}
	}
	if len(sb.buf) == 0 {
		sb.segno, sb.off, sb.create = w.segno, w.offset, w.create
		db.markBuffered(a)
	}
	sb.buf = append(sb.buf, w.buf...)
	db.buffered.Add(int64(len(w.buf)))
	if w.seal {
		// A sealed segment is immutable and durable before its successor
		// receives a byte, so recovery never meets a newer segment behind an
		// unsealed one.
		return db.flushBufferLocked(a, withSync)
	}
	if len(sb.buf) >= segBufferFlush {
		return db.flushBufferLocked(a)
	}
	return nil
}

const withSync = true

// flushBufferLocked writes the anchor's buffer to its segment file. With
// sync it also fsyncs the file and closes it (a seal).
//
// Every failure stops the database before segIO is released: a settle that
// fsyncs the same file afterwards and succeeds proves nothing about the
// pages this write or fsync lost (settle.go), so it checks for the failure
// under segIO.
func (db *DB) flushBufferLocked(a *anchor, sync ...bool) (err error) {
	sb := &a.wbuf
	if len(sb.buf) == 0 {
		return nil
	}
	if sb.failed != nil {
		return sb.failed
	}
	db.segIO.RLock()
	defer db.segIO.RUnlock()
	defer func() {
		if err != nil {
			err = db.fail(err)
		}
	}()
	seal := len(sync) > 0 && sync[0]
	path := db.segmentPath(a, sb.segno)
	if sb.create {
		if err := db.ensureAnchorDir(a); err != nil {
			return err
		}
		if _, err := db.fs.Stat(path); err == nil {
			return errs.New(errs.CodeIndexMismatch, "segment %s exists but the index says it is new", path).At(a.id, 0, path, 0)
		}
	}
	// Not ahead of the journal blocks of these bytes (segsync.go).
	if err := db.syncStagedJournal(); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "journal fdatasync before a segment write")
	}
	cf, err := db.files.acquire(path, true, sb.create)
	if err != nil && isFDPressure(err) {
		// The bytes are durable in the journal: wait for a descriptor
		// rather than stop every write (fdbudget.go).
		err = db.waitDescriptor(func() (err error) {
			cf, err = db.files.acquire(path, true, sb.create)
			return err
		})
	}
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "open segment %s", path)
	}
	_, err = cf.file.WriteAt(sb.buf, sb.off)
	if err == nil && seal {
		err = cf.file.Sync()
	}
	db.files.release(cf)
	if err != nil {
		// Marked under wmu, before any caller gets to db.fail: a reader
		// that takes wmu next (ensureWritten) already sees it.
		sb.failed = errs.Wrap(errs.CodeWriteFailed, err, "write segment %s at %d", path, sb.off)
		return sb.failed
	}
	db.dirtyMu.Lock()
	if sb.create {
		db.dirtyDirs[a.dir] = struct{}{}
	}
	if seal {
		delete(db.dirtyFiles, path)
	} else {
		db.dirtyFiles[path] = struct{}{}
	}
	db.dirtyMu.Unlock()
	if seal {
		db.files.forget(path) // reopened read-only when next read
		// The sealed file's own directory entry (and, for a new anchor, its
		// directory's) must be durable too: a segment created since the last
		// settle could otherwise vanish while its successor survives, and
		// recovery would see an unsealed segment followed by a newer one.
		if err := db.ensureDirsDurable(a); err != nil {
			return err
		}
	}
	db.metrics.segmentWrites.Add(1)
	if seal {
		db.metrics.seals.Add(1)
	}
	db.buffered.Add(-int64(len(sb.buf)))
	sb.off += int64(len(sb.buf))
	sb.buf, sb.create = sb.buf[:0], false
	if cap(sb.buf) > 4*segBufferFlush {
		sb.buf = nil // a large one-off record: do not keep its buffer
	}
	return nil
}

func (db *DB) markBuffered(a *anchor) {
	db.bufMu.Lock()
	db.bufferedAnchors[a] = struct{}{}
	db.bufMu.Unlock()
}

// flushAllBuffers writes every anchor's buffer out.
func (db *DB) flushAllBuffers() error {
	db.bufMu.Lock()
	anchors := make([]*anchor, 0, len(db.bufferedAnchors))
	for a := range db.bufferedAnchors {
		anchors = append(anchors, a)
	}
	clear(db.bufferedAnchors)
	db.bufMu.Unlock()
	for _, a := range anchors {
		a.wmu.Lock()
		err := db.flushBufferLocked(a)
		a.wmu.Unlock()
		if err != nil {
			return db.fail(err)
		}
	}
	return nil
}

// ensureWritten makes sure bytes [0, end) of segment segno of the anchor are
// in the file, not only in its buffer, before a reader reads them. If the
// write of bytes in that range failed, it returns IO_001: they are not in
// the file, whatever the file now holds there. A reader calls it before
// every record it returns, even one it has already read ahead, so bytes
// read from a failed write's range are never parsed as a record.
func (db *DB) ensureWritten(id string, segno uint64, end int64) error {
	db.anchorsMu.RLock()
	a := db.anchors[id]
	db.anchorsMu.RUnlock()
	if a == nil {
		return nil
	}
	a.wmu.Lock()
	defer a.wmu.Unlock()
	if len(a.wbuf.buf) == 0 || a.wbuf.segno != segno || a.wbuf.off >= end {
		return nil
	}
	if err := db.flushBufferLocked(a); err != nil {
		return db.fail(err)
	}
	return nil
}

// ensureDirsDurable fsyncs the anchor's directory and any of its parents
// still waiting for a settle.
func (db *DB) ensureDirsDurable(a *anchor) error {
	fan := db.fs.PathDir(a.dir)
	anchors := db.fs.PathDir(fan)
	var dirs []string
	db.dirtyMu.Lock()
	for _, d := range []string{a.dir, fan, anchors, db.fs.PathDir(anchors)} {
		if _, ok := db.dirtyDirs[d]; ok || d == a.dir {
			dirs = append(dirs, d)
			delete(db.dirtyDirs, d)
		}
	}
	db.dirtyMu.Unlock()
	for _, d := range dirs {
		if err := db.syncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// ensureAnchorDir creates the anchor's directory once and marks the
// directories whose entries changed for the next settle.
func (db *DB) ensureAnchorDir(a *anchor) error {
	if a.dirReady {
		return nil
	}
	if err := db.fs.MkdirAll(a.dir, 0o755); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "create anchor directory %s", a.dir)
	}
	// MkdirAll may have created the fan-out directory and anchors/ as well:
	// every entry up to the database root must reach the disk.
	fan := db.fs.PathDir(a.dir)
	anchors := db.fs.PathDir(fan)
	db.dirtyMu.Lock()
	db.dirtyDirs[fan] = struct{}{}
	db.dirtyDirs[anchors] = struct{}{}
	db.dirtyDirs[db.fs.PathDir(anchors)] = struct{}{}
	db.dirtyMu.Unlock()
	a.dirReady = true
	return nil
}
