package engine

import (
	"errors"
	"io"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// copyChunk is how much of a file writeFileFrom holds at once.
const copyChunk = 1 << 20

// writeFileFrom makes bytes [from, to) of the file src the whole of path,
// through path.tmp and a rename, as writeWholeFile does; bytes past the end
// of src are zeros. NB: a chunk at a time. Recovery cuts segments of up to
// 1 TiB (Options.SegmentSize) and saves the tail it cuts, which is as long
// as a damaged file is: neither the part kept nor the part cut is held
// whole.
func (db *DB) writeFileFrom(path, src string, from, to int64) error {
	return db.replaceFile(path, func(out vfs.File) error {
		// Closed before the rename, which may replace src itself.
		in, err := db.fs.Open(src)
		if err != nil {
			return errs.Wrap(errs.CodeWriteFailed, err, "open %s", src)
		}
		defer in.Close()
		for off := from; off < to; {
			// A new buffer each time: vfs may scribble on what Write is
			// given, so none is reused.
			buf := make([]byte, min(copyChunk, to-off))
			if _, err := in.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
				return errs.Wrap(errs.CodeWriteFailed, err, "read %s", src)
			}
			if _, err := out.Write(buf); err != nil {
				return err
			}
			off += int64(len(buf))
		}
		return nil
	})
}

// replaceFile writes path through path.tmp, filled by write, a sync and a
// rename, then syncs the directory: a crash leaves the old file or the new
// one, whole.
func (db *DB) replaceFile(path string, write func(vfs.File) error) error {
	tmp := path + ".tmp"
	f, err := db.fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "create %s", tmp)
	}
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	err = errors.Join(err, f.Close())
	if err == nil {
		err = db.fs.Rename(tmp, path)
	}
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "write %s", path)
	}
	db.files.forget(path)
	return db.syncDir(db.fs.PathDir(path))
}
