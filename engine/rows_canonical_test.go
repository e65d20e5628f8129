package engine

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
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

// TestRetainedRowWithTrailingBytes: an 'r' row holds exactly one frame.
// Verify refused one with bytes after the frame, but Record read it as the
// frame, so the damage showed only to verify. Found writing FuzzIndexRows
// (whose 'r' case takes a row only when the frame fills it, as verify
// does).
func TestRetainedRowWithTrailingBytes(t *testing.T) {
	ctx := context.Background()
	db := truncatedFixture(t)
	it, err := db.index.NewIter(&pebble.IterOptions{LowerBound: []byte{tagRetain}, UpperBound: []byte{tagRetain + 1}})
	if err != nil {
		t.Fatal(err)
	}
	if !it.First() {
		t.Fatal("the fixture has no 'r' row")
	}
	k, v := slices.Clone(it.Key()), slices.Clone(it.Value())
	_ = it.Close()
	prefix, _ := rowPrefix(k)
	anchor, seq := string(prefix[1:len(prefix)-1]), be.Uint64(k[len(prefix):])
	if _, err := db.Record(ctx, anchor, seq); err != nil {
		t.Fatalf("the kept record as compaction wrote it: %v", err)
	}
	setRow(t, db, k, append(v, 0))
	if rec, err := db.Record(ctx, anchor, seq); errs.CodeOf(err) != errs.CodeIndexMismatch {
		t.Fatalf("an 'r' row with a byte after its frame reads as %+v, %v; want INT_004", rec, err)
	}
}
