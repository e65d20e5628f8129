package schema

import (
	"fmt"
	"slices"

	"github.com/anchordb/anchordb/segment"
)

// Location is the value of an 's' row: where a record lives, its counter
// and its hash.
type Location struct {
	Segno   uint64
	Offset  int64
	Size    uint32 // frame size in bytes; 0: the segment was truncated
	Counter uint64
	Hash    segment.Hash
}

// LocationSize is the length of an 's' row's value.
const LocationSize = 8 + 8 + 4 + 8 + segment.HashSize

// Append appends the encoded row value to dst.
func (e *Location) Append(dst []byte) []byte {
	dst = slices.Grow(dst, LocationSize)
	dst = be.AppendUint64(dst, e.Segno)
	dst = be.AppendUint64(dst, uint64(e.Offset))
	dst = be.AppendUint32(dst, e.Size)
	dst = be.AppendUint64(dst, e.Counter)
	return append(dst, e.Hash[:]...)
}

// DecodeLocation decodes an 's' row's value.
func DecodeLocation(b []byte) (Location, error) {
	var e Location
	if len(b) != LocationSize {
		return e, fmt.Errorf("seq entry of %d bytes, want %d", len(b), LocationSize)
	}
	e.Segno = be.Uint64(b)
	e.Offset = int64(be.Uint64(b[8:]))
	e.Size = be.Uint32(b[16:])
	e.Counter = be.Uint64(b[20:])
	copy(e.Hash[:], b[28:])
	return e, nil
}

// SeqOf returns the seq of an 's' row key whose anchor prefix
// (AnchorPrefix(TagSeq, anchor)) is prefixLen bytes long; ok is false when
// the key has another length.
func SeqOf(prefixLen int, k []byte) (seq uint64, ok bool) {
	if len(k) != prefixLen+8 {
		return 0, false
	}
	return be.Uint64(k[prefixLen:]), true
}

// Version types in 'k' rows.
const (
	VersionPut    = 1
	VersionDelete = 2
)

// Version is the value of a 'k' row: enough to answer Get and give a
// receipt without touching the segment, unless the value is too large to keep
// inline.
type Version struct {
	Type   byte
	Seq    uint64
	Time   int64 // the record's time, for snapshots that outlive the log
	Hash   segment.Hash
	Segno  uint64
	Offset int64
	Size   uint32
	Inline bool
	Value  []byte // when Inline
}

// Append appends the encoded row value to dst.
func (v *Version) Append(dst []byte) []byte {
	// One allocation, not one per append that outgrows the last.
	dst = slices.Grow(dst, VersionFixed+len(v.Value))
	dst = append(dst, v.Type)
	dst = be.AppendUint64(dst, v.Seq)
	dst = be.AppendUint64(dst, uint64(v.Time))
	dst = append(dst, v.Hash[:]...)
	dst = be.AppendUint64(dst, v.Segno)
	dst = be.AppendUint64(dst, uint64(v.Offset))
	dst = be.AppendUint32(dst, v.Size)
	if v.Inline {
		dst = append(dst, 1)
		return append(dst, v.Value...)
	}
	return append(dst, 0)
}

// VersionFixed is the length of a 'k' row's value before an inline value.
const VersionFixed = 1 + 8 + 8 + segment.HashSize + 8 + 8 + 4 + 1

// DecodeVersion decodes a 'k' row's value. An inline Value aliases b.
func DecodeVersion(b []byte) (Version, error) {
	var v Version
	if len(b) < VersionFixed {
		return v, fmt.Errorf("version entry of %d bytes, want at least %d", len(b), VersionFixed)
	}
	v.Type = b[0]
	v.Seq = be.Uint64(b[1:])
	v.Time = int64(be.Uint64(b[9:]))
	copy(v.Hash[:], b[17:])
	p := 17 + segment.HashSize
	v.Segno = be.Uint64(b[p:])
	v.Offset = int64(be.Uint64(b[p+8:]))
	v.Size = be.Uint32(b[p+16:])
	switch b[p+20] {
	case 0:
	case 1:
		v.Inline = true
	default:
		return v, fmt.Errorf("version entry inline flag %d", b[p+20])
	}
	if v.Inline {
		v.Value = b[VersionFixed:]
	} else if len(b) != VersionFixed {
		return v, fmt.Errorf("version entry has %d trailing bytes without inline flag", len(b)-VersionFixed)
	}
	if v.Type != VersionPut && v.Type != VersionDelete {
		return v, fmt.Errorf("version entry type %d", v.Type)
	}
	return v, nil
}

// VersionKind tells the three kinds of 'k' row apart, by what their
// location says.
type VersionKind int

// The kinds of 'k' rows.
const (
	Located  VersionKind = iota // segment, offset and size of the record
	Kept                        // size 0 in a segment: compaction truncated the record and kept the row
	Deferred                    // no segment: a rebuild from a snapshot wrote it; the 's' row says where
)

// KindOf returns the kind of the 'k' row value v; one that does not decode
// is Located (verify then checks it against the segment and reports it).
func KindOf(v []byte) VersionKind {
	e, err := DecodeVersion(v)
	switch {
	case err != nil || e.Size != 0:
		return Located
	case e.Segno != 0:
		return Kept
	}
	return Deferred
}

// Idem is the value of an 'i' row: the original append's seq, counter and
// hash, and the fingerprint of its (type, key, value).
type Idem struct {
	Seq         uint64
	Counter     uint64
	Hash        segment.Hash
	Fingerprint segment.Hash
}

// IdemSize is the length of an 'i' row's value.
const IdemSize = 8 + 8 + 2*segment.HashSize

// Append appends the encoded row value to dst.
func (e *Idem) Append(dst []byte) []byte {
	dst = slices.Grow(dst, IdemSize)
	dst = be.AppendUint64(dst, e.Seq)
	dst = be.AppendUint64(dst, e.Counter)
	dst = append(dst, e.Hash[:]...)
	return append(dst, e.Fingerprint[:]...)
}

// DecodeIdem decodes an 'i' row's value.
func DecodeIdem(b []byte) (Idem, error) {
	var e Idem
	if len(b) != IdemSize {
		return e, fmt.Errorf("idempotency entry of %d bytes, want %d", len(b), IdemSize)
	}
	e.Seq = be.Uint64(b)
	e.Counter = be.Uint64(b[8:])
	copy(e.Hash[:], b[16:])
	copy(e.Fingerprint[:], b[16+segment.HashSize:])
	return e, nil
}

// AnchorMeta is the value of an 'a' row. It changes only when an anchor is
// created, a segment is sealed, or damage is recorded — never per record.
type AnchorMeta struct {
	ActiveSegno    uint64 // the segment new records go to
	ActiveFirstSeq uint64 // the seq that segment starts with
	Damage         string // non-empty: the anchor is read-only, and why
}

// Append appends the encoded row value to dst.
func (m *AnchorMeta) Append(dst []byte) []byte {
	dst = append(dst, 1) // version
	dst = be.AppendUint64(dst, m.ActiveSegno)
	dst = be.AppendUint64(dst, m.ActiveFirstSeq)
	return append(dst, m.Damage...)
}

// DecodeAnchorMeta decodes an 'a' row's value.
func DecodeAnchorMeta(b []byte) (AnchorMeta, error) {
	var m AnchorMeta
	if len(b) < 17 || b[0] != 1 {
		return m, fmt.Errorf("anchor metadata of %d bytes is malformed", len(b))
	}
	m.ActiveSegno = be.Uint64(b[1:])
	m.ActiveFirstSeq = be.Uint64(b[9:])
	m.Damage = string(b[17:])
	return m, nil
}
