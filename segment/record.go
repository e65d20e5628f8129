// Package segment holds the record format of anchordb and the segment files
// that store an anchor's hash-chained log.
//
// A record's canonical encoding (what its hash covers) is:
//
//	+---------+----------+-----------+--------------------------------------+
//	| version | anchorLen| anchor id | body                                 |
//	| u8 = 1  | u8 1–255 | anchorLen |                                      |
//	+---------+----------+-----------+--------------------------------------+
//
//	body:
//	+-----+---------+------+-------+------+-------+-------+-------+-------+-------+-------+-----------+
//	| seq | counter | time | tLen  | type | kLen  | key   | vLen  | value | iLen  | idem  | prev_hash |
//	| u64 | u64     | i64  | u8    | tLen | u32   | kLen  | u32   | vLen  | u16   | iLen  | 32 bytes  |
//	+-----+---------+------+-------+------+-------+-------+-------+-------+-------+-------+-----------+
//
// All integers are big-endian and fixed-width, so there is exactly one
// encoding of every record and re-encoding a decoded record gives the same
// bytes. hash = BLAKE3 derive-key(ContextRecord) over the canonical encoding.
//
// On disk a record is a frame: the body (the anchor id is in the segment
// header) between a length and the record hash:
//
//	+----------+------------------+-------------+
//	| bodyLen  | body             | record hash |
//	| u32      | bodyLen bytes    | 32 bytes    |
//	+----------+------------------+-------------+
//
// docs/FORMAT.md documents every byte of segment files.
package segment

import (
	"encoding/binary"
	"unicode"
	"unicode/utf8"

	"github.com/anchordb/anchordb/internal/errs"
)

var be = binary.BigEndian

// FormatVersion is the version byte of the canonical record encoding and of
// segment headers.
const FormatVersion = 1

// Record types with a key-value effect. Any other type is an event.
const (
	TypePut    = "put"
	TypeDelete = "delete"
)

// Fixed limits of the format itself. Configurable limits (Limits) may be lower,
// never higher.
const (
	MaxAnchorID      = 255
	MaxType          = 64
	MaxFormatKey     = 16 << 20  // 16 MiB
	MaxFormatValue   = 512 << 20 // 512 MiB
	MaxFormatIdemKey = 4096
	bodyFixed        = 8 + 8 + 8 + 1 + 4 + 4 + 2 + HashSize
	frameOverhead    = 4 + HashSize
	MaxFrameBody     = bodyFixed + MaxType + MaxFormatKey + MaxFormatValue + MaxFormatIdemKey
	// MaxFrameSize is the largest frame on disk: a size read from anywhere
	// (an index row) that is larger names no frame, and must not size a read.
	MaxFrameSize      = frameOverhead + MaxFrameBody
	canonicalPrefixSz = 2
)

// Limits are the configurable input limits of CONTRACT §9.
type Limits struct {
	MaxKey            int // bytes; default 64 KiB
	MaxValue          int // bytes; default 16 MiB
	MaxIdempotencyKey int // bytes; default 256
}

// DefaultLimits are the limits of CONTRACT §9.
func DefaultLimits() Limits {
	return Limits{MaxKey: 64 << 10, MaxValue: 16 << 20, MaxIdempotencyKey: 256}
}

// Validate checks that the limits stay within what the format can hold.
func (l Limits) Validate() error {
	if l.MaxKey <= 0 || l.MaxKey > MaxFormatKey {
		return errs.New(errs.CodeInvalidInput, "key limit %d outside 1..%d", l.MaxKey, MaxFormatKey)
	}
	if l.MaxValue < 0 || l.MaxValue > MaxFormatValue {
		return errs.New(errs.CodeInvalidInput, "value limit %d outside 0..%d", l.MaxValue, MaxFormatValue)
	}
	if l.MaxIdempotencyKey <= 0 || l.MaxIdempotencyKey > MaxFormatIdemKey {
		return errs.New(errs.CodeInvalidInput, "idempotency key limit %d outside 1..%d", l.MaxIdempotencyKey, MaxFormatIdemKey)
	}
	return nil
}

// MaxBody is the longest frame body a record within l can have: the fixed
// fields, the longest type, and a key, value and idempotency key at their
// limits. A reader that takes records only within l (an ingest) refuses a
// frame declaring more from its length alone, before reading it.
func (l Limits) MaxBody() int {
	return bodyFixed + MaxType + l.MaxKey + l.MaxValue + l.MaxIdempotencyKey
}

// Record is one entry of an anchor log.
type Record struct {
	Anchor         string
	Seq            uint64
	Counter        uint64
	Time           int64 // Unix nanoseconds
	Type           string
	Key            []byte // empty means "no key" (events only)
	Value          []byte
	IdempotencyKey []byte // empty means none
	PrevHash       Hash
	Hash           Hash
}

// IsKV reports whether the record changes the key-value state.
func (r *Record) IsKV() bool { return r.Type == TypePut || r.Type == TypeDelete }

// ValidateAnchorID checks CONTRACT §1: 1–255 bytes of valid UTF-8 with no control
// characters.
func ValidateAnchorID(id string) error {
	if len(id) == 0 {
		return errs.New(errs.CodeInvalidInput, "anchor id is empty (must be 1..%d bytes)", MaxAnchorID)
	}
	if len(id) > MaxAnchorID {
		return errs.New(errs.CodeInvalidInput, "anchor id is %d bytes (limit %d)", len(id), MaxAnchorID)
	}
	return validText("anchor id", id)
}

// ValidateType checks a record type: 1–64 bytes of UTF-8 with no control
// characters.
func ValidateType(typ string) error {
	if len(typ) == 0 || len(typ) > MaxType {
		return errs.New(errs.CodeInvalidInput, "record type is %d bytes (must be 1..%d)", len(typ), MaxType)
	}
	return validText("record type", typ)
}

func validText(what, s string) error {
	if !utf8.ValidString(s) {
		return errs.New(errs.CodeInvalidInput, "%s %q is not valid UTF-8", what, s)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return errs.New(errs.CodeInvalidInput, "%s %q contains control character %U", what, s, r)
		}
	}
	return nil
}

// ValidateContent checks the caller-supplied parts of a record (anchor, type,
// key, value, idempotency key) against the limits. Put and delete need a key
// of at least one byte; an event's key is optional.
func ValidateContent(anchor, typ string, key, value, idem []byte, l Limits) error {
	if err := ValidateAnchorID(anchor); err != nil {
		return err
	}
	if err := ValidateType(typ); err != nil {
		return err
	}
	if (typ == TypePut || typ == TypeDelete) && len(key) == 0 {
		return errs.New(errs.CodeInvalidInput, "a %s needs a key of 1..%d bytes", typ, l.MaxKey)
	}
	if len(key) > l.MaxKey {
		return errs.New(errs.CodeInvalidInput, "key is %d bytes (limit %d)", len(key), l.MaxKey)
	}
	if len(value) > l.MaxValue {
		return errs.New(errs.CodeInvalidInput, "value is %d bytes (limit %d)", len(value), l.MaxValue)
	}
	if typ == TypeDelete && len(value) != 0 {
		return errs.New(errs.CodeInvalidInput, "a delete carries no value (got %d bytes)", len(value))
	}
	if len(idem) > l.MaxIdempotencyKey {
		return errs.New(errs.CodeInvalidInput, "idempotency key is %d bytes (limit %d)", len(idem), l.MaxIdempotencyKey)
	}
	return nil
}

// BodySize returns the encoded size of the record body.
func (r *Record) BodySize() int {
	return bodyFixed + len(r.Type) + len(r.Key) + len(r.Value) + len(r.IdempotencyKey)
}

// FrameSize returns the on-disk size of the record's frame.
func (r *Record) FrameSize() int { return frameOverhead + r.BodySize() }

// AppendBody appends the record body (the canonical encoding without the
// version and anchor prefix) to dst.
func AppendBody(dst []byte, r *Record) []byte {
	var fixed [8 + 8 + 8 + 1]byte
	be.PutUint64(fixed[0:8], r.Seq)
	be.PutUint64(fixed[8:16], r.Counter)
	be.PutUint64(fixed[16:24], uint64(r.Time))
	fixed[24] = byte(len(r.Type))
	dst = append(dst, fixed[:]...)
	dst = append(dst, r.Type...)
	dst = be.AppendUint32(dst, uint32(len(r.Key)))
	dst = append(dst, r.Key...)
	dst = be.AppendUint32(dst, uint32(len(r.Value)))
	dst = append(dst, r.Value...)
	dst = be.AppendUint16(dst, uint16(len(r.IdempotencyKey)))
	dst = append(dst, r.IdempotencyKey...)
	dst = append(dst, r.PrevHash[:]...)
	return dst
}

// AppendCanonical appends the full canonical encoding (what the hash covers).
func AppendCanonical(dst []byte, r *Record) []byte {
	dst = append(dst, FormatVersion, byte(len(r.Anchor)))
	dst = append(dst, r.Anchor...)
	return AppendBody(dst, r)
}

// HashBody computes the record hash from the anchor id and an encoded body,
// without building the canonical encoding in memory.
func HashBody(anchor string, body []byte) Hash {
	h := recordHashers.get()
	var prefix [canonicalPrefixSz]byte
	prefix[0], prefix[1] = FormatVersion, byte(len(anchor))
	_, _ = h.Write(prefix[:])
	_, _ = h.WriteString(anchor)
	_, _ = h.Write(body)
	var out Hash
	h.Sum(out[:0])
	recordHashers.put(h)
	return out
}

// ComputeHash returns the hash of the record's canonical encoding. It does not
// read or set r.Hash.
func (r *Record) ComputeHash() Hash {
	return HashBody(r.Anchor, AppendBody(make([]byte, 0, r.BodySize()), r))
}

// AppendFrame seals the record — sets r.Hash — and appends its frame to dst.
func AppendFrame(dst []byte, r *Record) []byte {
	start := len(dst)
	dst = be.AppendUint32(dst, uint32(r.BodySize()))
	dst = AppendBody(dst, r)
	r.Hash = HashBody(r.Anchor, dst[start+4:])
	return append(dst, r.Hash[:]...)
}

// DecodeBody decodes a record body of the given anchor. It checks structure
// only (lengths, UTF-8, no trailing bytes), never the hash, and copies nothing:
// the returned slices alias body.
func DecodeBody(anchor string, body []byte) (Record, error) {
	r := Record{Anchor: anchor}
	if len(body) < bodyFixed {
		return r, errs.New(errs.CodeInvalidInput, "record body of %d bytes is shorter than the %d fixed bytes", len(body), bodyFixed)
	}
	r.Seq = be.Uint64(body[0:8])
	r.Counter = be.Uint64(body[8:16])
	r.Time = int64(be.Uint64(body[16:24]))
	p := 24
	take := func(n int, what string) ([]byte, error) {
		if n < 0 || n > len(body)-p {
			return nil, errs.New(errs.CodeInvalidInput, "record %s length %d runs past the body", what, n)
		}
		b := body[p : p+n : p+n]
		p += n
		return b, nil
	}
	tLen := int(body[p])
	p++
	t, err := take(tLen, "type")
	if err != nil {
		return r, err
	}
	r.Type = string(t)
	if len(body)-p < 4 {
		return r, errs.New(errs.CodeInvalidInput, "record body truncated before key length")
	}
	kLen := int(be.Uint32(body[p:]))
	p += 4
	if r.Key, err = take(kLen, "key"); err != nil {
		return r, err
	}
	if len(body)-p < 4 {
		return r, errs.New(errs.CodeInvalidInput, "record body truncated before value length")
	}
	vLen := int(be.Uint32(body[p:]))
	p += 4
	if r.Value, err = take(vLen, "value"); err != nil {
		return r, err
	}
	if len(body)-p < 2 {
		return r, errs.New(errs.CodeInvalidInput, "record body truncated before idempotency key length")
	}
	iLen := int(be.Uint16(body[p:]))
	p += 2
	if r.IdempotencyKey, err = take(iLen, "idempotency key"); err != nil {
		return r, err
	}
	if len(body)-p != HashSize {
		return r, errs.New(errs.CodeInvalidInput, "record body has %d bytes after the idempotency key, want %d (prev_hash)", len(body)-p, HashSize)
	}
	copy(r.PrevHash[:], body[p:])
	if len(r.Key) == 0 {
		r.Key = nil
	}
	if len(r.Value) == 0 {
		r.Value = nil
	}
	if len(r.IdempotencyKey) == 0 {
		r.IdempotencyKey = nil
	}
	if err := ValidateType(r.Type); err != nil {
		return r, err
	}
	if r.Seq == 0 {
		return r, errs.New(errs.CodeInvalidInput, "record seq is 0 (seqs start at 1)")
	}
	if r.Key == nil && r.IsKV() {
		return r, errs.New(errs.CodeInvalidInput, "a %s record has no key", r.Type)
	}
	return r, nil
}

// DecodeCanonical decodes a full canonical encoding (version, anchor, body).
func DecodeCanonical(b []byte) (Record, error) {
	if len(b) < canonicalPrefixSz {
		return Record{}, errs.New(errs.CodeInvalidInput, "canonical record of %d bytes is too short", len(b))
	}
	if b[0] != FormatVersion {
		return Record{}, errs.New(errs.CodeInvalidInput, "canonical record version %d, want %d", b[0], FormatVersion)
	}
	aLen := int(b[1])
	if len(b)-canonicalPrefixSz < aLen {
		return Record{}, errs.New(errs.CodeInvalidInput, "canonical record anchor length %d runs past the end", aLen)
	}
	anchor := string(b[2 : 2+aLen])
	if err := ValidateAnchorID(anchor); err != nil {
		return Record{}, err
	}
	return DecodeBody(anchor, b[2+aLen:])
}

// Clone returns a deep copy of r whose slices do not alias any buffer.
func (r Record) Clone() Record {
	r.Key = cloneBytes(r.Key)
	r.Value = cloneBytes(r.Value)
	r.IdempotencyKey = cloneBytes(r.IdempotencyKey)
	return r
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}
