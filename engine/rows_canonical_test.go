package engine

import (
	"bytes"
	"testing"

	"github.com/anchordb/anchordb/segment"
)

// TestVersionEntryInlineFlag: the inline flag of a 'k' row is 0 or 1. Any
// other byte (a damaged row) was read as "not inline", so the row decoded to
// a value that encodes to other bytes: damage the decoder hid. Found
// writing FuzzIndexRows' round-trip property.
func TestVersionEntryInlineFlag(t *testing.T) {
	v := versionEntry{Type: verPut, Seq: 3, Time: 5, Hash: segment.Hash{1}, Segno: 1, Offset: 64, Size: 90}
	b := v.encode(nil)
	if got, err := decodeVersionEntry(b); err != nil || got.Inline {
		t.Fatalf("as encoded: %+v, %v", got, err)
	}
	for _, flag := range []byte{2, 0x80, 0xFF} {
		bad := bytes.Clone(b)
		bad[versionFixed-1] = flag
		if got, err := decodeVersionEntry(bad); err == nil {
			t.Errorf("inline flag %d: decoded as %+v", flag, got)
		}
	}
}

// TestHistoryFromCanonical: the mhistory_from row lists each anchor once, in
// ascending order, with a non-empty id, as encodeHistoryFrom writes it. A
// row that repeated an id was read with the last value winning, and one out
// of order or with an empty id was read at all: damage the decoder hid.
// Found writing FuzzIndexRows.
func TestHistoryFromCanonical(t *testing.T) {
	row := func(ids ...string) []byte {
		var b []byte
		for i, id := range ids {
			b = append(b, byte(len(id)))
			b = append(b, id...)
			b = be.AppendUint64(b, uint64(i+1))
		}
		return b
	}
	good := row("a", "b")
	if m, err := decodeHistoryFrom(good); err != nil || len(m) != 2 || !bytes.Equal(encodeHistoryFrom(m), good) {
		t.Fatalf("as encoded: %v, %v", m, err)
	}
	for name, b := range map[string][]byte{
		"repeated id":  row("a", "a"),
		"out of order": row("b", "a"),
		"empty id":     row(""),
		"cut short":    good[:len(good)-1],
	} {
		if m, err := decodeHistoryFrom(b); err == nil {
			t.Errorf("%s: decoded as %v", name, m)
		}
	}
}
