package engine

// The index's meta rows (engine/internal/schema names them) as the engine
// reads and writes them, and the database id they and DBID hold.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/cockroachdb/pebble/v2"
)

// setMetaDurable writes a u64 meta row and flushes the index.
func (db *DB) setMetaDurable(name string, v uint64) error {
	if err := db.index.Set(schema.MetaKey(name), be.AppendUint64(nil, v), pebble.NoSync); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "write index meta %s", name)
	}
	return db.flushIndex()
}

// loadOrCreateID reads the database id file, creating it (durably) for a new
// database.
func (db *DB) loadOrCreateID() (string, error) {
	path := db.fs.PathJoin(db.dir, IDFile)
	// NB: looked at before it is opened (a FIFO's open blocks); one that is
	// not a regular file is as malformed as one that holds no id.
	if _, err := fsutil.Regular(db.fs, path, false); fsutil.IsEntryError(err) {
		e := errs.New(errs.CodeInvalidInput, "database id file %s is malformed: %s", path, errs.Message(err))
		e.File = path
		return "", e
	}
	if f, err := db.fs.Open(path); err == nil {
		buf := make([]byte, 64)
		n, rerr := f.ReadAt(buf, 0)
		_ = f.Close()
		if rerr != nil && !errors.Is(rerr, io.EOF) { // an I/O error, not a malformed file
			return "", errs.Wrap(errs.CodeWriteFailed, rerr, "read %s", path).At("", 0, path, 0)
		}
		id := strings.TrimSpace(string(buf[:n]))
		if len(id) != 32 || !isHex(id) {
			return "", errs.New(errs.CodeInvalidInput, "database id file %s is malformed", path)
		}
		return id, nil
	} else if !oserrorIsNotExist(err) {
		return "", errs.Wrap(errs.CodeWriteFailed, err, "read %s", path)
	}
	// An index from before the id file: keep its id.
	if v, ok, err := db.metaBytes(schema.MetaDBID); err != nil {
		return "", err
	} else if ok && len(v) == 32 && isHex(string(v)) {
		return string(v), db.writeWholeFile(path, append(v, '\n'))
	}
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("database id: %w", err)
	}
	id := hex.EncodeToString(raw[:])
	return id, db.writeWholeFile(path, []byte(id+"\n"))
}

func (db *DB) metaBytes(name string) ([]byte, bool, error) {
	v, closer, err := db.index.Get(schema.MetaKey(name))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, errs.Wrap(errs.CodeWriteFailed, err, "read index meta %s", name)
	}
	defer closer.Close()
	return append([]byte(nil), v...), true, nil
}

// metaUint reads a u64 meta row; fresh reports that it is absent.
func (db *DB) metaUint(name string) (v uint64, fresh bool, err error) {
	b, ok, err := db.metaBytes(name)
	if err != nil || !ok {
		return 0, !ok, err
	}
	if len(b) != 8 {
		return 0, false, errs.New(errs.CodeIndexMismatch, "index meta %s is %d bytes", name, len(b))
	}
	return be.Uint64(b), false, nil
}
