package schema

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// The table tags: the first byte of every index key.
const (
	TagAnchor = 'a' // anchor metadata (AnchorMeta)
	TagIdem   = 'i' // idempotency keys (Idem)
	TagKey    = 'k' // key versions (Version)
	TagMeta   = 'm' // database metadata (the Meta* names)
	TagNode   = 'n' // stored Merkle nodes
	TagKept   = 'r' // frames of records kept after their segment was truncated
	TagSeq    = 's' // where each record lives (Location)
)

// MetaKey is the key of the meta row name.
func MetaKey(name string) []byte { return append([]byte{TagMeta}, name...) }

// AnchorKey is the key of the anchor's 'a' row.
func AnchorKey(anchor string) []byte { return append([]byte{TagAnchor}, anchor...) }

// AnchorPrefix returns tag ‖ anchor ‖ 0x00, the prefix of an anchor's rows
// in the table tag ('i', 'n', 'r' or 's').
func AnchorPrefix(tag byte, anchor string) []byte {
	k := make([]byte, 0, 2+len(anchor)+8)
	k = append(k, tag)
	k = append(k, anchor...)
	return append(k, 0)
}

// SeqKey is the key of the 's' row of record seq of the anchor.
func SeqKey(anchor string, seq uint64) []byte {
	return AppendSeqKey(make([]byte, 0, SeqKeySize(anchor)), anchor, seq)
}

// SeqKeySize is the length of SeqKey(anchor, seq).
func SeqKeySize(anchor string) int { return 1 + len(anchor) + 1 + 8 }

// AppendSeqKey appends SeqKey(anchor, seq) to dst.
func AppendSeqKey(dst []byte, anchor string, seq uint64) []byte {
	dst = append(dst, TagSeq)
	dst = append(dst, anchor...)
	dst = append(dst, 0)
	return be.AppendUint64(dst, seq)
}

// KeptKey is the key of the 'r' row of record seq of the anchor.
func KeptKey(anchor string, seq uint64) []byte {
	return be.AppendUint64(AnchorPrefix(TagKept, anchor), seq)
}

// IdemKey is the key of the 'i' row of idempotency key idem in the anchor.
func IdemKey(anchor string, idem []byte) []byte {
	return append(AnchorPrefix(TagIdem, anchor), idem...)
}

// NodeKey is the key of the 'n' row of the anchor's tree node at (level,
// index).
func NodeKey(anchor string, level uint8, index uint64) []byte {
	k := append(AnchorPrefix(TagNode, anchor), level)
	return be.AppendUint64(k, index)
}

// ParseNodeKey returns the level and index of an 'n' row key whose anchor
// prefix (AnchorPrefix(TagNode, anchor)) is prefixLen bytes long; ok is
// false when the key has another length.
func ParseNodeKey(prefixLen int, k []byte) (level uint8, index uint64, ok bool) {
	if len(k) != prefixLen+9 {
		return 0, 0, false
	}
	return k[prefixLen], be.Uint64(k[prefixLen+1:]), true
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

// KeyPrefix returns 'k' ‖ esc(key) ‖ 0x00 0x01: the prefix of all of key's
// versions.
func KeyPrefix(key []byte) []byte {
	return AppendKeyPrefix(make([]byte, 0, 1+len(key)+2+8+16), key)
}

// AppendKeyPrefix appends KeyPrefix(key) to dst.
func AppendKeyPrefix(dst, key []byte) []byte {
	dst = append(dst, TagKey)
	dst = appendEscaped(dst, key)
	return append(dst, 0, 1)
}

// AppendPastVersions appends the smallest index key after every version of
// key: its prefix with the separator's 0x01 raised to 0x02. A scan of the
// newest versions seeks there to skip the older ones.
func AppendPastVersions(dst, key []byte) []byte {
	dst = AppendKeyPrefix(dst, key)
	dst[len(dst)-1] = 2
	return dst
}

// VersionKey is KeyPrefix(key) ‖ ^counter ‖ desc(anchor): Pebble's ascending
// order lists a key's versions newest first in merged order, where newest
// means the highest counter and, on a tie, the highest anchor id bytes.
func VersionKey(key []byte, counter uint64, anchor string) []byte {
	return AppendVersionKey(make([]byte, 0, 1+len(key)+2+8+len(anchor)+1), key, counter, anchor)
}

// AppendVersionKey appends VersionKey(key, counter, anchor) to dst.
func AppendVersionKey(dst, key []byte, counter uint64, anchor string) []byte {
	dst = AppendKeyPrefix(dst, key)
	dst = be.AppendUint64(dst, ^counter)
	for i := 0; i < len(anchor); i++ {
		dst = append(dst, 0xFF-anchor[i])
	}
	// Inverted anchor bytes are at most 0xFF-0x20 (no control characters), so
	// 0xFF terminates and makes a shorter id sort after its extensions.
	return append(dst, 0xFF)
}

// ParseVersionKey returns the user key, counter and anchor of a version key.
func ParseVersionKey(k []byte) (key []byte, counter uint64, anchor string, err error) {
	key, ab, counter, err := AppendVersionKeyParts(nil, nil, k)
	if err != nil {
		return nil, 0, "", err
	}
	return key, counter, string(ab), nil
}

// AppendVersionKeyParts is ParseVersionKey for loops that reuse buffers: it
// appends the user key to dst and the anchor id's bytes to anchorDst.
func AppendVersionKeyParts(dst, anchorDst, k []byte) (key, anchor []byte, counter uint64, err error) {
	if len(k) < 1+2+8+2 || k[0] != TagKey || k[len(k)-1] != 0xFF {
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

// VersionKeyPrefixLen returns the length of the prefix a 'k' row key shares
// with every version of its key: 'k' ‖ esc(key) ‖ 0x00 0x01.
func VersionKeyPrefixLen(k []byte) (int, bool) {
	if len(k) == 0 || k[0] != TagKey {
		return 0, false
	}
	for i := 1; ; {
		j := bytes.IndexByte(k[i:], 0)
		if j < 0 || i+j+1 >= len(k) {
			return 0, false
		}
		i += j
		switch k[i+1] {
		case 0x01:
			return i + 2, true
		case 0xFF:
			i += 2
		default:
			return 0, false
		}
	}
}

// VersionKeyAnchor appends to dst the anchor id of a 'k' row key, without
// unescaping its user key (a scan of every 'k' row needs only the id).
func VersionKeyAnchor(dst, k []byte) ([]byte, bool) {
	if len(k) < 1+2+8+2 || k[len(k)-1] != 0xFF {
		return dst, false
	}
	p, ok := VersionKeyPrefixLen(k)
	if !ok {
		return dst, false
	}
	rest := k[p:]
	if len(rest) < 8+2 {
		return dst, false
	}
	for _, b := range rest[8 : len(rest)-1] {
		dst = append(dst, 0xFF-b)
	}
	return dst, true
}

// PrefixEnd returns the smallest key greater than every key with prefix p, or
// nil when there is none.
func PrefixEnd(p []byte) []byte {
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

// ScanBounds returns the index bounds of every version of every key starting
// with prefix.
func ScanBounds(prefix []byte) (lower, upper []byte) {
	lower = appendEscaped([]byte{TagKey}, prefix)
	return lower, PrefixEnd(lower)
}

// RangeBounds returns the index bounds of every version of every key in
// [start, end); a nil end means no upper bound.
func RangeBounds(start, end []byte) (lower, upper []byte) {
	lower = appendEscaped([]byte{TagKey}, start)
	upper = []byte{TagKey + 1}
	if end != nil {
		upper = appendEscaped([]byte{TagKey}, end)
	}
	return lower, upper
}

// NextKey moves it to the first key at or after next: the first version of
// the following user key. Most keys have one version, so a few Next calls
// usually get there far more cheaply than a seek.
func NextKey(it *pebble.Iterator, next []byte) bool {
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
