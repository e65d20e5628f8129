package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/anchordb/anchordb/segment"
)

// The index is a Pebble database. Every key starts with a one-byte table tag:
//
//	'a' anchor ‖ …                      anchor metadata (active segment, damage)
//	'i' anchor ‖ 0x00 ‖ idempotency key  the original receipt and fingerprint
//	'k' esc(key) ‖ 0x00 0x01 ‖ ^counter(u64) ‖ desc(anchor) ‖ 0xFF
//	                                     one version of a key; newest first
//	'm' name                             database metadata
//	'n' anchor ‖ 0x00 ‖ level(u8) ‖ index(u64)
//	                                     a stored Merkle node (levels 8, 16, …)
//	'r' anchor ‖ 0x00 ‖ seq(u64)         the frame of a record whose segment was
//	                                     truncated, kept because it is its key's last
//	                                     version in that segment
//	's' anchor ‖ 0x00 ‖ seq(u64)         where a record lives, its counter and hash
//	                                     (size 0: its segment was truncated)
//
// Anchor ids never contain 0x00 (SPEC §1 forbids control characters), so
// 0x00 ends them without escaping and byte order of ids is preserved. User
// keys may contain anything, so they are escaped (0x00 → 0x00 0xFF) and end
// with 0x00 0x01: byte order of keys is preserved and no key's versions can
// interleave with another's.
const (
	tagAnchor = 'a'
	tagIdem   = 'i'
	tagKey    = 'k'
	tagMeta   = 'm'
	tagNode   = 'n'
	tagRetain = 'r'
	tagSeq    = 's'
)

var be = binary.BigEndian

func metaKey(name string) []byte { return append([]byte{tagMeta}, name...) }

func anchorKey(anchor string) []byte { return append([]byte{tagAnchor}, anchor...) }

// anchorScoped returns tag ‖ anchor ‖ 0x00, the prefix of an anchor's rows.
func anchorScoped(tag byte, anchor string) []byte {
	k := make([]byte, 0, 2+len(anchor)+8)
	k = append(k, tag)
	k = append(k, anchor...)
	return append(k, 0)
}

func seqKey(anchor string, seq uint64) []byte {
	return appendSeqKey(make([]byte, 0, seqKeySize(anchor)), anchor, seq)
}

// seqKeySize is the length of seqKey(anchor, seq).
func seqKeySize(anchor string) int { return 1 + len(anchor) + 1 + 8 }

// appendSeqKey appends seqKey(anchor, seq) to dst.
func appendSeqKey(dst []byte, anchor string, seq uint64) []byte {
	dst = append(dst, tagSeq)
	dst = append(dst, anchor...)
	dst = append(dst, 0)
	return be.AppendUint64(dst, seq)
}

func retainedKey(anchor string, seq uint64) []byte {
	return be.AppendUint64(anchorScoped(tagRetain, anchor), seq)
}

func idemKey(anchor string, idem []byte) []byte {
	return append(anchorScoped(tagIdem, anchor), idem...)
}

func nodeKey(anchor string, level uint8, index uint64) []byte {
	k := append(anchorScoped(tagNode, anchor), level)
	return be.AppendUint64(k, index)
}

// appendEscaped appends key with 0x00 escaped as 0x00 0xFF.
func appendEscaped(dst, key []byte) []byte {
	for _, c := range key {
		if c == 0 {
			dst = append(dst, 0, 0xFF)
		} else {
			dst = append(dst, c)
		}
	}
	return dst
}

// keyPrefix returns 'k' ‖ esc(key) ‖ 0x00 0x01: the prefix of all of key's
// versions.
func keyPrefix(key []byte) []byte {
	return appendKeyPrefix(make([]byte, 0, 1+len(key)+2+8+16), key)
}

// appendKeyPrefix appends keyPrefix(key) to dst.
func appendKeyPrefix(dst, key []byte) []byte {
	dst = append(dst, tagKey)
	dst = appendEscaped(dst, key)
	return append(dst, 0, 1)
}

// appendPastVersions appends the smallest index key after every version of
// key: its prefix with the separator's 0x01 raised to 0x02. A scan of the
// newest versions seeks there to skip the older ones.
func appendPastVersions(dst, key []byte) []byte {
	dst = appendKeyPrefix(dst, key)
	dst[len(dst)-1] = 2
	return dst
}

// versionKey is keyPrefix(key) ‖ ^counter ‖ desc(anchor): Pebble's ascending
// order lists a key's versions newest first in merged order, where newest
// means the highest counter and, on a tie, the highest anchor id bytes.
func versionKey(key []byte, counter uint64, anchor string) []byte {
	return appendVersionKey(make([]byte, 0, 1+len(key)+2+8+len(anchor)+1), key, counter, anchor)
}

// appendVersionKey appends versionKey(key, counter, anchor) to dst.
func appendVersionKey(dst, key []byte, counter uint64, anchor string) []byte {
	dst = appendKeyPrefix(dst, key)
	dst = be.AppendUint64(dst, ^counter)
	for i := 0; i < len(anchor); i++ {
		dst = append(dst, 0xFF-anchor[i])
	}
	// Inverted anchor bytes are at most 0xFF-0x20 (no control characters), so
	// 0xFF terminates and makes a shorter id sort after its extensions.
	return append(dst, 0xFF)
}

// parseVersionKey returns the user key, counter and anchor of a version key.
func parseVersionKey(k []byte) (key []byte, counter uint64, anchor string, err error) {
	key, ab, counter, err := appendVersionKeyParts(nil, nil, k)
	if err != nil {
		return nil, 0, "", err
	}
	return key, counter, string(ab), nil
}

// appendVersionKeyParts is parseVersionKey for loops that reuse buffers: it
// appends the user key to dst and the anchor id's bytes to anchorDst.
func appendVersionKeyParts(dst, anchorDst, k []byte) (key, anchor []byte, counter uint64, err error) {
	if len(k) < 1+2+8+2 || k[0] != tagKey || k[len(k)-1] != 0xFF {
		return nil, nil, 0, fmt.Errorf("malformed version key %x", k)
	}
	key = dst
	i, sep := 1, false
	for ; i+1 < len(k); i++ {
		if k[i] != 0 {
			key = append(key, k[i])
			continue
		}
		switch k[i+1] {
		case 0xFF:
			key = append(key, 0)
			i++
			continue
		case 0x01:
			sep = true
		default:
			return nil, nil, 0, fmt.Errorf("malformed escape in version key %x", k)
		}
		break
	}
	if !sep {
		// Running off the end without the separator leaves i past the
		// tail: slicing there would panic on a malformed row.
		return nil, nil, 0, fmt.Errorf("version key %x has no key separator", k)
	}
	rest := k[i+2:]
	if len(rest) < 8+2 {
		return nil, nil, 0, fmt.Errorf("malformed version key tail %x", k)
	}
	counter = ^be.Uint64(rest)
	anchor = anchorDst
	for _, c := range rest[8 : len(rest)-1] {
		anchor = append(anchor, 0xFF-c)
	}
	return key, anchor, counter, nil
}

// prefixEnd returns the smallest key greater than every key with prefix p, or
// nil when there is none.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for len(end) > 0 {
		if end[len(end)-1] < 0xFF {
			end[len(end)-1]++
			return end
		}
		end = end[:len(end)-1]
	}
	return nil
}

// scanBounds returns the index bounds of every version of every key starting
// with prefix.
func scanBounds(prefix []byte) (lower, upper []byte) {
	lower = appendEscaped([]byte{tagKey}, prefix)
	return lower, prefixEnd(lower)
}

// seqEntry is the value of an 's' row.
type seqEntry struct {
	Segno   uint64
	Offset  int64
	Size    uint32 // frame size in bytes
	Counter uint64
	Hash    segment.Hash
}

const seqEntrySize = 8 + 8 + 4 + 8 + segment.HashSize

func (e *seqEntry) encode(dst []byte) []byte {
	dst = slices.Grow(dst, seqEntrySize)
	dst = be.AppendUint64(dst, e.Segno)
	dst = be.AppendUint64(dst, uint64(e.Offset))
	dst = be.AppendUint32(dst, e.Size)
	dst = be.AppendUint64(dst, e.Counter)
	return append(dst, e.Hash[:]...)
}

func decodeSeqEntry(b []byte) (seqEntry, error) {
	var e seqEntry
	if len(b) != seqEntrySize {
		return e, fmt.Errorf("seq entry of %d bytes, want %d", len(b), seqEntrySize)
	}
	e.Segno = be.Uint64(b)
	e.Offset = int64(be.Uint64(b[8:]))
	e.Size = be.Uint32(b[16:])
	e.Counter = be.Uint64(b[20:])
	copy(e.Hash[:], b[28:])
	return e, nil
}

// version types in 'k' rows.
const (
	verPut    = 1
	verDelete = 2
)

// versionEntry is the value of a 'k' row: enough to answer Get and give a
// receipt without touching the segment, unless the value is too large to keep
// inline.
type versionEntry struct {
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

func (v *versionEntry) encode(dst []byte) []byte {
	// One allocation, not one per append that outgrows the last.
	dst = slices.Grow(dst, versionFixed+len(v.Value))
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

const versionFixed = 1 + 8 + 8 + segment.HashSize + 8 + 8 + 4 + 1

func decodeVersionEntry(b []byte) (versionEntry, error) {
	var v versionEntry
	if len(b) < versionFixed {
		return v, fmt.Errorf("version entry of %d bytes, want at least %d", len(b), versionFixed)
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
		v.Value = b[versionFixed:]
	} else if len(b) != versionFixed {
		return v, fmt.Errorf("version entry has %d trailing bytes without inline flag", len(b)-versionFixed)
	}
	if v.Type != verPut && v.Type != verDelete {
		return v, fmt.Errorf("version entry type %d", v.Type)
	}
	return v, nil
}

// idemEntry is the value of an 'i' row.
type idemEntry struct {
	Seq         uint64
	Counter     uint64
	Hash        segment.Hash
	Fingerprint segment.Hash
}

// duplicateOf is the receipt a retry carrying the key gets in anchor: the
// original append's, marked a duplicate (SPEC §7).
func (e idemEntry) duplicateOf(anchor string) Receipt {
	return Receipt{Anchor: anchor, Seq: e.Seq, Counter: e.Counter, Hash: e.Hash, Duplicate: true}
}

const idemEntrySize = 8 + 8 + 2*segment.HashSize

func (e *idemEntry) encode(dst []byte) []byte {
	dst = slices.Grow(dst, idemEntrySize)
	dst = be.AppendUint64(dst, e.Seq)
	dst = be.AppendUint64(dst, e.Counter)
	dst = append(dst, e.Hash[:]...)
	return append(dst, e.Fingerprint[:]...)
}

func decodeIdemEntry(b []byte) (idemEntry, error) {
	var e idemEntry
	if len(b) != idemEntrySize {
		return e, fmt.Errorf("idempotency entry of %d bytes, want %d", len(b), idemEntrySize)
	}
	e.Seq = be.Uint64(b)
	e.Counter = be.Uint64(b[8:])
	copy(e.Hash[:], b[16:])
	copy(e.Fingerprint[:], b[16+segment.HashSize:])
	return e, nil
}

// anchorMeta is the value of an 'a' row. It changes only when an anchor is
// created, a segment is sealed, or damage is recorded — never per record.
type anchorMeta struct {
	ActiveSegno    uint64 // the segment new records go to
	ActiveFirstSeq uint64 // the seq that segment starts with
	Damage         string // non-empty: the anchor is read-only, and why
}

func (m *anchorMeta) encode(dst []byte) []byte {
	dst = append(dst, 1) // version
	dst = be.AppendUint64(dst, m.ActiveSegno)
	dst = be.AppendUint64(dst, m.ActiveFirstSeq)
	return append(dst, m.Damage...)
}

func decodeAnchorMeta(b []byte) (anchorMeta, error) {
	var m anchorMeta
	if len(b) < 17 || b[0] != 1 {
		return m, fmt.Errorf("anchor metadata of %d bytes is malformed", len(b))
	}
	m.ActiveSegno = be.Uint64(b[1:])
	m.ActiveFirstSeq = be.Uint64(b[9:])
	m.Damage = string(b[17:])
	return m, nil
}

// nextKey moves it to the first key at or after next: the first version of
// the following user key. Most keys have one version, so a few Next calls
// usually get there far more cheaply than a seek.
func nextKey(it *pebble.Iterator, next []byte) bool {
	for i := 0; i < 4; i++ {
		if !it.Next() {
			return false
		}
		if bytes.Compare(it.Key(), next) >= 0 {
			return true
		}
	}
	return it.SeekGE(next)
}
