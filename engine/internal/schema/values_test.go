package schema

import (
	"bytes"
	"testing"

	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
)

// TestVersionInlineFlag: the inline flag of a 'k' row is 0 or 1. Any other
// byte (a damaged row) read as "not inline" would decode to a value that
// encodes to other bytes: damage the decoder hid. Found writing
// FuzzIndexRows' round-trip property.
func TestVersionInlineFlag(t *testing.T) {
	v := Version{Type: VersionPut, Seq: 3, Time: 5, Hash: segment.Hash{1}, Segno: 1, Offset: 64, Size: 90}
	b := v.Append(nil)
	if got, err := DecodeVersion(b); err != nil || got.Inline {
		t.Fatalf("as encoded: %+v, %v", got, err)
	}
	for _, flag := range []byte{2, 0x80, 0xFF} {
		bad := bytes.Clone(b)
		bad[VersionFixed-1] = flag
		if got, err := DecodeVersion(bad); err == nil {
			t.Errorf("inline flag %d: decoded as %+v", flag, got)
		}
	}
}

// TestHistoryFromCanonical: the mhistory_from row lists each anchor once, in
// ascending order, with a non-empty id, as EncodeHistoryFrom writes it. A
// row that repeats an id must not be read with the last value winning, nor
// one out of order or with an empty id at all: that would hide damage.
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
	if m, err := DecodeHistoryFrom(good); err != nil || len(m) != 2 || !bytes.Equal(EncodeHistoryFrom(m), good) {
		t.Fatalf("as encoded: %v, %v", m, err)
	}
	for name, b := range map[string][]byte{
		"repeated id":  row("a", "a"),
		"out of order": row("b", "a"),
		"empty id":     row(""),
		"cut short":    good[:len(good)-1],
	} {
		if m, err := DecodeHistoryFrom(b); err == nil {
			t.Errorf("%s: decoded as %v", name, m)
		}
	}
}

// TestValueSizes: the fixed sizes docs/FORMAT.md §6 states.
func TestValueSizes(t *testing.T) {
	for _, c := range []struct {
		what      string
		got, want int
	}{
		{"'s' value", len((&Location{}).Append(nil)), LocationSize},
		{"'s' value (§6.3)", LocationSize, 60},
		{"'i' value", len((&Idem{}).Append(nil)), IdemSize},
		{"'i' value (§6.4)", IdemSize, 80},
		{"'k' value without inline bytes", len((&Version{Type: VersionPut}).Append(nil)), VersionFixed},
		{"'k' fixed value (§6.5)", VersionFixed, 70},
		{"audit head (§6.7)", len(AppendAuditHead(nil, 1, segment.Hash{})), 40},
		{"'a' value without damage (§6.2)", len((&AnchorMeta{}).Append(nil)), 17},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d bytes, want %d", c.what, c.got, c.want)
		}
	}
}

// TestKindOf: a 'k' row's kind is read from its location.
func TestKindOf(t *testing.T) {
	for _, c := range []struct {
		v    Version
		want VersionKind
	}{
		{Version{Type: VersionPut, Segno: 3, Offset: 90, Size: 100}, Located},
		{Version{Type: VersionPut, Segno: 3, Inline: true, Value: []byte("v")}, Kept},
		{Version{Type: VersionDelete, Segno: 3}, Kept},
		{Version{Type: VersionPut, Inline: true}, Deferred},
	} {
		if got := KindOf(c.v.Append(nil)); got != c.want {
			t.Errorf("%+v: kind %d, want %d", c.v, got, c.want)
		}
	}
	if got := KindOf([]byte{1, 2, 3}); got != Located {
		t.Errorf("a value that does not decode: kind %d, want Located (verify checks it)", got)
	}
}

// TestRecordRows: the rows of one record, as commits, recovery, rebuilds and
// verify write them: its 's' row, its 'k' row (to the versions setter) with
// the value inline up to the bound, its 'i' row when it has a key.
func TestRecordRows(t *testing.T) {
	rec := &segment.Record{Anchor: "a", Seq: 4, Counter: 9, Time: 7, Type: segment.TypePut, Key: []byte("k"),
		Value: []byte("value"), IdempotencyKey: []byte("req")}
	rec.Hash = segment.Hash{5}
	for _, inlineMax := range []int{4, 5} {
		rows, versions := rowMap{}, rowMap{}
		_ = RecordRows(rows, versions, rec, 2, 300, 120, inlineMax, nil)
		loc, err := DecodeLocation(rows[string(SeqKey("a", 4))])
		if err != nil || loc != (Location{Segno: 2, Offset: 300, Size: 120, Counter: 9, Hash: rec.Hash}) {
			t.Fatalf("'s' row: %+v, %v", loc, err)
		}
		idem, err := DecodeIdem(rows[string(IdemKey("a", []byte("req")))])
		if err != nil || idem.Seq != 4 || idem.Fingerprint != segment.Fingerprint(rec.Type, rec.Key, rec.Value) {
			t.Fatalf("'i' row: %+v, %v", idem, err)
		}
		v, err := DecodeVersion(versions[string(VersionKey([]byte("k"), 9, "a"))])
		if err != nil || v.Inline != (inlineMax >= 5) || v.Segno != 2 || v.Size != 120 || v.Seq != 4 {
			t.Fatalf("'k' row at inline bound %d: %+v, %v", inlineMax, v, err)
		}
		if len(rows) != 2 || len(versions) != 1 {
			t.Fatalf("rows %d and versions %d, want 2 and 1", len(rows), len(versions))
		}
	}
}

// rowMap is a RowSetter that keeps the rows it is given.
type rowMap map[string][]byte

func (m rowMap) Set(k, v []byte, _ *pebble.WriteOptions) error {
	m[string(k)] = bytes.Clone(v)
	return nil
}
