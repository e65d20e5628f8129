package schema

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestVersionKeyRoundTrip checks ParseVersionKey against VersionKey for any
// key (NUL bytes included, which are escaped), counter and anchor id up to
// the longest legal one.
func TestVersionKeyRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		key := rapid.SliceOfN(rapid.Byte(), 1, 64).Draw(t, "key")
		counter := rapid.Uint64().Draw(t, "counter")
		anchor := rapid.StringMatching(`[a-zA-Z0-9./é-]{1,255}`).Filter(func(s string) bool { return len(s) <= 255 }).Draw(t, "anchor")
		vk := VersionKey(key, counter, anchor)
		k, c, a, err := ParseVersionKey(vk)
		if err != nil {
			t.Fatalf("parse: %v", err)
		}
		if !bytes.Equal(k, key) || c != counter || a != anchor {
			t.Fatalf("got (%x, %d, %q), want (%x, %d, %q)", k, c, a, key, counter, anchor)
		}
		if p, ok := VersionKeyPrefixLen(vk); !ok || !bytes.Equal(vk[:p], KeyPrefix(key)) {
			t.Fatalf("prefix of %x: %d, %v; want %x", vk, p, ok, KeyPrefix(key))
		}
	})
}

// TestParseVersionKeyRejects: malformed keys are errors, never panics.
func TestParseVersionKeyRejects(t *testing.T) {
	good := VersionKey([]byte("k"), 7, "a")
	long := VersionKey([]byte("k"), 7, strings.Repeat("a", 255))
	for name, k := range map[string][]byte{
		"empty":         nil,
		"short":         good[:5],
		"no terminator": good[:len(good)-1],
		"bad escape":    append([]byte{TagKey, 'k', 0, 0x07}, good[3:]...),
	} {
		if _, _, _, err := ParseVersionKey(k); err == nil {
			t.Errorf("%s: %x parsed", name, k)
		}
	}
	if _, _, a, err := ParseVersionKey(long); err != nil || len(a) != 255 {
		t.Fatalf("255-byte anchor: %q, %v", a, err)
	}
}

// TestParseVersionKeyWithoutSeparator: a malformed 'k' row is an error,
// never a panic. A key with no 0x00 0x01 separator must not run the parse
// off its end (slicing the tail from two bytes past the last).
func TestParseVersionKeyWithoutSeparator(t *testing.T) {
	for name, k := range map[string][]byte{
		"no separator":      []byte("kabcdefghijklmn\xff"),
		"escape at the end": []byte("kabcdefghijklm\x00\xff"),
	} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: %x panicked: %v", name, k, r)
				}
			}()
			if _, _, _, err := ParseVersionKey(k); err == nil {
				t.Errorf("%s: %x parsed", name, k)
			}
		}()
	}
	rapid.Check(t, func(t *rapid.T) {
		k := rapid.SliceOfN(rapid.SampledFrom([]byte{0, 1, 'k', 'x', 0xFF}), 0, 40).Draw(t, "k")
		if rapid.Bool().Draw(t, "tagged") {
			k = append([]byte{TagKey}, append(k, 0xFF)...)
		}
		_, _, _, _ = ParseVersionKey(k)
	})
}

// TestVersionKeyAnchorAgreesWithParse: the scan that reads only a 'k' row
// key's anchor id (verify's pass over every 'k' row) accepts what the full
// parse accepts and reads the same id, for well-formed keys and for bytes
// drawn to hit the escapes and the separator.
func TestVersionKeyAnchorAgreesWithParse(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var k []byte
		if rapid.Bool().Draw(t, "well-formed") {
			key := rapid.SliceOfN(rapid.SampledFrom([]byte{0, 1, 2, 'x', 0xFF}), 0, 16).Draw(t, "key")
			anchor := rapid.StringMatching(`[a-z0-9/]{1,20}`).Draw(t, "anchor")
			k = VersionKey(key, rapid.Uint64().Draw(t, "counter"), anchor)
		} else {
			k = rapid.SliceOfN(rapid.SampledFrom([]byte{0, 1, 'k', 'x', 0xFE, 0xFF}), 0, 40).Draw(t, "k")
			if rapid.Bool().Draw(t, "tagged") {
				k = append([]byte{TagKey}, append(k, 0xFF)...)
			}
		}
		_, _, want, err := ParseVersionKey(k)
		got, ok := VersionKeyAnchor([]byte("reused"), k)
		if ok != (err == nil) {
			t.Fatalf("%x: VersionKeyAnchor ok %v, ParseVersionKey %v", k, ok, err)
		}
		if ok && string(got) != "reused"+want {
			t.Fatalf("%x: anchor %q, want %q after the reused bytes", k, got, want)
		}
		if !ok && string(got) != "reused" {
			t.Fatalf("%x: refused, yet dst became %q", k, got)
		}
	})
}

// TestKeysOfAnchorScopedTables: an anchor's 'i', 'n', 'r' and 's' rows start
// with its prefix, and the parsers read back what the key builders wrote.
func TestKeysOfAnchorScopedTables(t *testing.T) {
	const id = "device-17"
	for _, c := range []struct {
		tag byte
		key []byte
	}{
		{TagIdem, IdemKey(id, []byte("req"))},
		{TagNode, NodeKey(id, 8, 3)},
		{TagKept, KeptKey(id, 9)},
		{TagSeq, SeqKey(id, 9)},
	} {
		if p := AnchorPrefix(c.tag, id); !bytes.HasPrefix(c.key, p) || bytes.Compare(c.key, PrefixEnd(p)) >= 0 {
			t.Errorf("%c key %x is not within its anchor's prefix %x", c.tag, c.key, p)
		}
	}
	p := len(AnchorPrefix(TagNode, id))
	if level, index, ok := ParseNodeKey(p, NodeKey(id, 16, 1<<40)); !ok || level != 16 || index != 1<<40 {
		t.Errorf("node key parses as %d, %d, %v", level, index, ok)
	}
	if _, _, ok := ParseNodeKey(p, NodeKey(id, 16, 1)[1:]); ok {
		t.Error("a node key of another length parsed")
	}
	if seq, ok := SeqOf(len(AnchorPrefix(TagSeq, id)), SeqKey(id, 77)); !ok || seq != 77 {
		t.Errorf("seq key parses as %d, %v", seq, ok)
	}
	if len(SeqKey(id, 1)) != SeqKeySize(id) || !bytes.Equal(AppendSeqKey([]byte("x"), id, 1), append([]byte("x"), SeqKey(id, 1)...)) {
		t.Error("SeqKeySize or AppendSeqKey disagrees with SeqKey")
	}
	if got := PrefixEnd([]byte{'a', 0xFF, 0xFF}); !bytes.Equal(got, []byte{'b'}) {
		t.Errorf("PrefixEnd(a FF FF) = %x, want 62", got)
	}
	if PrefixEnd([]byte{0xFF}) != nil {
		t.Error("PrefixEnd(FF) is not nil")
	}
}

// TestVersionOrder: a key's versions sort newest first (highest counter,
// then highest anchor id bytes), a key before its extensions, all of them
// between ScanBounds of any prefix of the key, and AppendPastVersions after
// every version of the key and before the next key's.
func TestVersionOrder(t *testing.T) {
	keys := [][]byte{
		VersionKey([]byte("a"), 9, "x"),
		VersionKey([]byte("a"), 9, "w"),
		VersionKey([]byte("a"), 9, "ww"),
		VersionKey([]byte("a"), 2, "z"),
		VersionKey([]byte("a\x00"), 5, "x"),
		VersionKey([]byte("ab"), 5, "x"),
	}
	// desc(id): "ww" sorts before "w" (a shorter id sorts after its
	// extensions), so the expected order is x, ww, w at counter 9.
	want := [][]byte{keys[0], keys[2], keys[1], keys[3], keys[4], keys[5]}
	got := slices.Clone(keys)
	slices.SortFunc(got, bytes.Compare)
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("order %d: %x, want %x", i, got[i], want[i])
		}
	}
	past := AppendPastVersions(nil, []byte("a"))
	if bytes.Compare(past, keys[3]) <= 0 || bytes.Compare(past, keys[4]) >= 0 {
		t.Errorf("past-versions key %x is not between a's last version and the next key", past)
	}
	lo, hi := ScanBounds([]byte("a"))
	for _, k := range keys {
		if bytes.Compare(k, lo) < 0 || bytes.Compare(k, hi) >= 0 {
			t.Errorf("%x outside ScanBounds(a) [%x, %x)", k, lo, hi)
		}
	}
	lo, hi = RangeBounds([]byte("a\x00"), []byte("ab"))
	for i, k := range keys {
		if in := bytes.Compare(k, lo) >= 0 && bytes.Compare(k, hi) < 0; in != (i == 4) {
			t.Errorf("%x within RangeBounds(a 00, ab): %v", k, in)
		}
	}
	if lo, hi = RangeBounds(nil, nil); !bytes.Equal(lo, []byte{TagKey}) || !bytes.Equal(hi, []byte{TagKey + 1}) {
		t.Errorf("RangeBounds(nil, nil) = [%x, %x), want the whole table", lo, hi)
	}
}
