package merge

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/jsonobj"
	"github.com/anchordb/anchordb/segment"
	"github.com/zeebo/blake3"
)

// ContextFrontier is the BLAKE3 derive-key context of Frontier.Hash, in the
// family of segment's contexts (segment.ContextRecord and the rest), so a
// frontier hash can never equal a record, state or Merkle hash.
const ContextFrontier = "anchordb 2026-11 frontier v1"

// Frontier names a prefix of every anchor log: anchor id → the seq of the
// last record included (CONTRACT §1). An anchor that is absent, or present with
// seq 0, contributes no records; the encodings, the hash and Equal treat the
// two alike.
//
// Canonical binary encoding (MarshalBinary), big-endian:
//
//	+-------+----------------------------------------------+
//	| count | count × entry, anchor ids strictly ascending  |
//	| u32   |          as raw bytes; zero seqs omitted     |
//	+-------+----------------------------------------------+
//
//	entry:
//	+-----------+-----------+-----+
//	| anchorLen | anchor id | seq |
//	| u8 1–255  | anchorLen | u64 |
//	+-----------+-----------+-----+
//
// JSON form (MarshalJSON): an object {"anchor id": seq, …} with keys in the
// same byte order, no whitespace, strings escaped as encoding/json escapes
// them (so "<" is \u003c whether or not the caller goes through json.Marshal),
// zero seqs omitted — e.g. {"a":3,"b/c":7}. Decoding accepts any key order and zero seqs (dropped),
// and refuses duplicate keys, invalid anchor ids and anything but
// non-negative integers (no fractions, no exponents).
type Frontier map[string]uint64

// Contains reports whether the record (anchor, seq) lies inside the frontier.
func (f Frontier) Contains(anchor string, seq uint64) bool {
	return seq >= 1 && seq <= f[anchor]
}

// Validate checks every anchor id (CONTRACT §1).
func (f Frontier) Validate() error {
	for a := range f {
		if err := segment.ValidateAnchorID(a); err != nil {
			return fmt.Errorf("frontier: %w", err)
		}
	}
	return nil
}

// Anchors returns the anchors with a nonzero seq, sorted by raw bytes.
func (f Frontier) Anchors() []string {
	out := make([]string, 0, len(f))
	for a, s := range f {
		if s > 0 {
			out = append(out, a)
		}
	}
	slices.Sort(out) // string order is byte order
	return out
}

// Total returns the number of records inside the frontier: the sum of seqs.
func (f Frontier) Total() uint64 {
	var n uint64
	for _, s := range f {
		n += s
	}
	return n
}

// Clone returns a copy without zero entries.
func (f Frontier) Clone() Frontier {
	out := make(Frontier, len(f))
	for a, s := range f {
		if s > 0 {
			out[a] = s
		}
	}
	return out
}

// Covers reports whether f includes every record g does: f[a] >= g[a] for
// every anchor a.
func (f Frontier) Covers(g Frontier) bool {
	for a, s := range g {
		if f[a] < s {
			return false
		}
	}
	return true
}

// LessOrEqual reports whether every record of f is in g (g.Covers(f)).
// Frontiers are partially ordered: two frontiers can each hold a record the
// other lacks, and then neither is LessOrEqual the other.
func (f Frontier) LessOrEqual(g Frontier) bool { return g.Covers(f) }

// Equal reports whether f and g name the same prefix.
func (f Frontier) Equal(g Frontier) bool { return f.Covers(g) && g.Covers(f) }

// AppendBinary appends the canonical binary encoding to dst. It fails with
// INPUT_001 when an anchor id is invalid.
func (f Frontier) AppendBinary(dst []byte) ([]byte, error) {
	if err := f.Validate(); err != nil {
		return dst, err
	}
	anchors := f.Anchors()
	if uint64(len(anchors)) > 1<<32-1 {
		return dst, errs.New(errs.CodeInvalidInput, "frontier of %d anchors exceeds the format's 2^32-1", len(anchors))
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(anchors)))
	for _, a := range anchors {
		dst = append(dst, byte(len(a)))
		dst = append(dst, a...)
		dst = binary.BigEndian.AppendUint64(dst, f[a])
	}
	return dst, nil
}

// MarshalBinary returns the canonical binary encoding.
func (f Frontier) MarshalBinary() ([]byte, error) { return f.AppendBinary(nil) }

// UnmarshalBinary decodes a canonical binary encoding into *f, replacing its
// contents. Anything but the canonical encoding — unsorted or repeated
// anchors, a zero seq, an invalid id, trailing bytes — is INPUT_001.
func (f *Frontier) UnmarshalBinary(b []byte) error {
	bad := func(format string, args ...any) error {
		return errs.New(errs.CodeInvalidInput, "malformed frontier encoding: "+format, args...)
	}
	if len(b) < 4 {
		return bad("%d bytes, shorter than the count", len(b))
	}
	n := binary.BigEndian.Uint32(b)
	p := 4
	// Each entry is at least 1+1+8 bytes: bound the map by the input.
	if uint64(n) > uint64(len(b)-p)/10 {
		return bad("count %d does not fit in %d bytes", n, len(b)-p)
	}
	out := make(Frontier, n)
	prev := ""
	for i := uint32(0); i < n; i++ {
		if len(b)-p < 1 {
			return bad("entry %d cut short", i)
		}
		aLen := int(b[p])
		p++
		if len(b)-p < aLen+8 {
			return bad("entry %d cut short", i)
		}
		a := string(b[p : p+aLen])
		p += aLen
		seq := binary.BigEndian.Uint64(b[p:])
		p += 8
		if err := segment.ValidateAnchorID(a); err != nil {
			return fmt.Errorf("malformed frontier encoding: entry %d: %w", i, err)
		}
		if i > 0 && a <= prev {
			return bad("anchor %q follows %q (must be strictly ascending)", a, prev)
		}
		if seq == 0 {
			return bad("anchor %q has seq 0 (omitted in the canonical form)", a)
		}
		out[a] = seq
		prev = a
	}
	if p != len(b) {
		return bad("%d trailing bytes", len(b)-p)
	}
	*f = out
	return nil
}

// Hash returns BLAKE3 derive-key(ContextFrontier) of the canonical binary
// encoding: equal frontiers, and only they, have equal hashes.
func (f Frontier) Hash() (segment.Hash, error) {
	b, err := f.MarshalBinary()
	if err != nil {
		return segment.Hash{}, err
	}
	var h segment.Hash
	blake3.DeriveKey(ContextFrontier, b, h[:])
	return h, nil
}

// MarshalJSON returns the canonical JSON form described on Frontier.
func (f Frontier) MarshalJSON() ([]byte, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	out := []byte{'{'}
	for i, a := range f.Anchors() {
		if i > 0 {
			out = append(out, ',')
		}
		key, err := json.Marshal(a)
		if err != nil {
			return nil, fmt.Errorf("frontier: encode anchor %q: %w", a, err)
		}
		out = append(out, key...)
		out = append(out, ':')
		out = strconv.AppendUint(out, f[a], 10)
	}
	return append(out, '}'), nil
}

// UnmarshalJSON decodes the JSON form into *f, replacing its contents. Errors
// are INPUT_001.
func (f *Frontier) UnmarshalJSON(b []byte) error {
	bad := func(format string, args ...any) error {
		return errs.New(errs.CodeInvalidInput, "malformed frontier JSON: "+format, args...)
	}
	// encoding/json reads bytes that are not UTF-8, and a lone surrogate
	// escape ("\ud800"), as U+FFFD: the id would name another anchor.
	if !utf8.Valid(b) {
		return bad("not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	out := make(Frontier)
	replacements := 0 // U+FFFD in the decoded ids
	err := jsonobj.Fields(dec, func(a string) error {
		if err := segment.ValidateAnchorID(a); err != nil {
			return fmt.Errorf("malformed frontier JSON: %w", err)
		}
		replacements += strings.Count(a, "\uFFFD")
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		num, ok := tok.(json.Number)
		if !ok {
			return bad("anchor %q: seq %v is not a number", a, tok)
		}
		seq, err := strconv.ParseUint(num.String(), 10, 64)
		if err != nil {
			return bad("anchor %q: seq %s is not an integer in 0..2^64-1", a, num)
		}
		if seq > 0 {
			out[a] = seq
		}
		return nil
	})
	var coded *errs.Error
	var notObject *jsonobj.NotObjectError
	var dup *jsonobj.DuplicateKeyError
	switch {
	case err == nil:
	case errors.As(err, &coded): // an anchor's or a seq's own error
		return err
	case errors.As(err, &notObject):
		return bad("want an object, got %v", notObject.Got)
	case errors.As(err, &dup):
		return bad("anchor %q appears twice", dup.Key)
	default:
		return errs.Wrap(errs.CodeInvalidInput, err, "malformed frontier JSON")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return bad("data after the object")
	}
	// Every string of the object is an id (a seq is a number), so the ids
	// hold exactly as many U+FFFD as the input spells, or one was made up.
	if replacements > jsonobj.SpelledReplacements(b) {
		return bad("an anchor id holds a lone or unpaired UTF-16 surrogate escape, which is not a character")
	}
	*f = out
	return nil
}
