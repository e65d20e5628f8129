package engine

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The audit mark: which audit line an append is about to write, durable
// before the line is.
//
// The audit log's head (lines, last hash) is an index row written without
// a sync, as every index row is; it becomes durable with the next memtable
// flush. An unclean stop can lose it after lines were written: the log
// then holds lines past the head, and a line past the head is not the
// database's unless something durable says it is (the chain has no key:
// anyone can extend it). The mark says it: before line k is written, (k,
// hash of line k) is fdatasynced into the mark file, and a log whose line k
// has that hash holds the database's own lines up to k, the lines between
// the head and k included (each line's hash covers the one before it).
//
// The file holds two slots of auditMarkSlot bytes, the mark for line k in
// slot k mod 2, each a schema.AppendAuditHead value and the CRC-32C of it,
// big-endian. A power loss that tears the write of mark k+1 leaves mark k
// whole in the other slot, and line k+1 was not written (its write follows
// the mark's fdatasync). One fdatasync of an existing file: the index row
// it replaces (schema.MetaAuditNext, still read) cost a Pebble flush.

// AuditMarkFile is the audit mark's name under the database root
// (docs/FORMAT.md §1, §9).
const AuditMarkFile = "audit.next"

// auditMarkSlot is the size of one slot of the mark file.
const auditMarkSlot = schema.AuditHeadSize + 4

var auditMarkCRC = crc32.MakeTable(crc32.Castagnoli)

// auditMark is one mark: line seq of the audit log will have hash hash.
type auditMark struct {
	seq  uint64
	hash segment.Hash
}

func (m auditMark) slot() []byte {
	b := schema.AppendAuditHead(make([]byte, 0, auditMarkSlot), m.seq, m.hash)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, auditMarkCRC))
}

// writeAuditMark makes m durable in its slot of the mark file. A new file's
// directory entry is fsynced too.
func (db *DB) writeAuditMark(m auditMark) error {
	fs := db.fs
	path := fs.PathJoin(db.dir, AuditMarkFile)
	_, statErr := fs.Stat(path)
	f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "audit mark: open %s", path)
	}
	_, err = f.WriteAt(m.slot(), int64(m.seq%2)*auditMarkSlot)
	if err == nil {
		err = f.SyncData()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "audit mark: write %s", path)
	}
	if oserrorIsNotExist(statErr) {
		return syncDirOf(fs, db.dir)
	}
	return nil
}

// auditMarks returns the marks the file holds whole (none for a missing
// file, a short one or torn slots). A file that cannot be read is IO_001.
func (db *DB) auditMarks() ([]auditMark, error) {
	path := db.fs.PathJoin(db.dir, AuditMarkFile)
	f, err := fsutil.Open(db.fs, path, false)
	if err != nil {
		if oserrorIsNotExist(err) || fsutil.IsEntryError(err) {
			// NB: never opened when it is not a regular file (a FIFO's
			// open blocks); such an entry is no mark.
			return nil, nil
		}
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "audit mark: open %s", path)
	}
	defer f.Close()
	buf := make([]byte, 2*auditMarkSlot)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "audit mark: read %s", path)
	}
	var marks []auditMark
	for off := 0; off+auditMarkSlot <= n; off += auditMarkSlot {
		s := buf[off : off+auditMarkSlot]
		body := s[:schema.AuditHeadSize]
		if binary.BigEndian.Uint32(s[schema.AuditHeadSize:]) != crc32.Checksum(body, auditMarkCRC) {
			continue
		}
		if seq, hash, ok := schema.DecodeAuditHead(body); ok && seq > 0 {
			marks = append(marks, auditMark{seq: seq, hash: hash})
		}
	}
	return marks, nil
}
