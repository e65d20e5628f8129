package engine

import (
	"bytes"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestVersionKeyRoundTrip checks parseVersionKey against versionKey for any
// key (NUL bytes included, which are escaped), counter and anchor id up to
// the longest legal one.
func TestVersionKeyRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		key := rapid.SliceOfN(rapid.Byte(), 1, 64).Draw(t, "key")
		counter := rapid.Uint64().Draw(t, "counter")
		anchor := rapid.StringMatching(`[a-zA-Z0-9./é-]{1,255}`).Filter(func(s string) bool { return len(s) <= 255 }).Draw(t, "anchor")
		k, c, a, err := parseVersionKey(versionKey(key, counter, anchor))
		if err != nil {
			t.Fatalf("parse: %v", err)
		}
		if !bytes.Equal(k, key) || c != counter || a != anchor {
			t.Fatalf("got (%x, %d, %q), want (%x, %d, %q)", k, c, a, key, counter, anchor)
		}
	})
}

// TestParseVersionKeyRejects: malformed keys are errors, never panics.
func TestParseVersionKeyRejects(t *testing.T) {
	good := versionKey([]byte("k"), 7, "a")
	long := versionKey([]byte("k"), 7, strings.Repeat("a", 255))
	for name, k := range map[string][]byte{
		"empty":         nil,
		"short":         good[:5],
		"no terminator": good[:len(good)-1],
		"bad escape":    append([]byte{tagKey, 'k', 0, 0x07}, good[3:]...),
	} {
		if _, _, _, err := parseVersionKey(k); err == nil {
			t.Errorf("%s: %x parsed", name, k)
		}
	}
	if _, _, a, err := parseVersionKey(long); err != nil || len(a) != 255 {
		t.Fatalf("255-byte anchor: %q, %v", a, err)
	}
}
