package schema

import (
	"bytes"
	"fmt"
	"maps"
	"slices"

	"github.com/anchordb/anchordb/segment"
)

// Format is the version of the index layout, the value of the MetaFormat
// row. An index of another version is refused; rebuild-index makes a new
// one.
const Format = 2

// The names of the meta rows ('m' ‖ name; MetaKey). docs/FORMAT.md §6.7
// gives each value's layout.
const (
	MetaFormat  = "format"  // u64: Format
	MetaDBID    = "dbid"    // 32 hex characters, random at creation
	MetaClean   = "clean"   // u64: 1 after a clean Close, 0 while open
	MetaClock   = "clock"   // u64: the Lamport clock
	MetaSettled = "settled" // a journal position (internal/journal's Pos encoding): segments hold everything before it durably
	MetaAudit   = "audit"   // AuditHead: lines ‖ hash of the last: the audit log's head
	// MetaAuditNext is the line an append was about to write (AuditHead:
	// u64 seq ‖ hash), as engines before 48cca40 (2026-11-29) made it durable
	// before the line: a line matching it is the database's own. The
	// engine reads it still; it writes its marks to a file of their own
	// (engine/auditmark.go).
	MetaAuditNext = "audit_next"
	// MetaDamaged is present once some anchor's 'a' row holds damage: Open
	// then names every damaged anchor without a scan of the 'a' rows on
	// every other open. Its value is DamagedFlag.
	MetaDamaged = "damaged"
	// MetaHistoryFrom names the row a rebuild from a snapshot leaves: per
	// anchor, the seq up to which its history was not rebuilt (the
	// snapshot's frontier). Below it the index has the snapshot's state, not
	// every version. EncodeHistoryFrom gives its value.
	MetaHistoryFrom = "history_from"
)

// DamagedFlag is the value of the MetaDamaged row; its presence is what
// counts.
var DamagedFlag = []byte{1}

// AuditHeadSize is the length of the MetaAudit and MetaAuditNext values.
const AuditHeadSize = 8 + segment.HashSize

// AppendAuditHead appends a MetaAudit or MetaAuditNext value to dst: a line
// count (or seq) and the hash of that line.
func AppendAuditHead(dst []byte, lines uint64, last segment.Hash) []byte {
	dst = slices.Grow(dst, AuditHeadSize)
	return append(be.AppendUint64(dst, lines), last[:]...)
}

// DecodeAuditHead decodes what AppendAuditHead writes; ok is false for a
// value of another length.
func DecodeAuditHead(b []byte) (lines uint64, last segment.Hash, ok bool) {
	if len(b) != AuditHeadSize {
		return 0, last, false
	}
	return be.Uint64(b), segment.Hash(b[8:]), true
}

// EncodeHistoryFrom encodes a MetaHistoryFrom value: per anchor, in
// ascending order of id, u8 len ‖ id ‖ u64 seq.
func EncodeHistoryFrom(m map[string]uint64) []byte {
	ids := slices.Sorted(maps.Keys(m))
	var b []byte
	for _, id := range ids {
		b = append(b, byte(len(id)))
		b = append(b, id...)
		b = be.AppendUint64(b, m[id])
	}
	return b
}

// DecodeHistoryFrom decodes a MetaHistoryFrom value. It accepts only what
// EncodeHistoryFrom writes: an id repeated, out of order or empty is a
// damaged row, not one to read with the last value winning.
func DecodeHistoryFrom(v []byte) (map[string]uint64, error) {
	out := map[string]uint64{}
	var last []byte
	for len(v) > 0 {
		n := int(v[0])
		if n == 0 || len(v) < 1+n+8 {
			return nil, fmt.Errorf("malformed %s row", MetaHistoryFrom)
		}
		id := v[1 : 1+n]
		if last != nil && bytes.Compare(id, last) <= 0 {
			return nil, fmt.Errorf("%s row lists anchor %q after %q", MetaHistoryFrom, id, last)
		}
		out[string(id)] = be.Uint64(v[1+n:])
		last, v = id, v[1+n+8:]
	}
	return out, nil
}
