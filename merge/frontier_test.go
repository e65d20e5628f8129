package merge

import (
	"encoding/json"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"pgregory.net/rapid"
)

func drawFrontier(t *rapid.T) Frontier {
	return rapid.MapOfN(rapid.SampledFrom(anchorPool), rapid.Uint64Range(0, 1<<40), 0, len(anchorPool)).Draw(t, "frontier")
}

func TestFrontierEncodingsRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := drawFrontier(t)
		b, err := f.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var g Frontier
		if err := g.UnmarshalBinary(b); err != nil {
			t.Fatalf("decode %x: %v", b, err)
		}
		if !g.Equal(f) || len(g) != len(f.Anchors()) {
			t.Fatalf("binary round trip: %v → %v", f, g)
		}
		j, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		var h Frontier
		if err := json.Unmarshal(j, &h); err != nil {
			t.Fatalf("decode %s: %v", j, err)
		}
		if !h.Equal(f) {
			t.Fatalf("JSON round trip: %v → %s → %v", f, j, h)
		}
		// Canonical: re-encoding gives the same bytes, and the hash follows.
		b2, _ := g.MarshalBinary()
		h1, _ := f.Hash()
		h2, _ := h.Hash()
		if string(b2) != string(b) || h1 != h2 {
			t.Fatalf("encoding not canonical")
		}
	})
}

func TestFrontierCanonicalForm(t *testing.T) {
	f := Frontier{"é": 2, "Z": 1, "a": 3, "e\u0301": 4, "zero": 0, "<&>": 5}
	j, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"\u003c\u0026\u003e":5,"Z":1,"a":3,"e` + "\u0301" + `":4,"é":2}`
	if string(j) != want {
		t.Fatalf("JSON form %s, want %s", j, want)
	}
	b, _ := f.MarshalBinary()
	// count 5; first entry "<&>" (3 bytes) seq 5.
	if b[3] != 5 || b[4] != 3 || string(b[5:8]) != "<&>" || b[15] != 5 {
		t.Fatalf("binary form %x", b)
	}
	h1, _ := f.Hash()
	h2, _ := Frontier{"a": 3, "Z": 1, "e\u0301": 4, "é": 2, "<&>": 5}.Hash()
	h3, _ := Frontier{"a": 3, "Z": 1, "e\u0301": 4, "é": 2, "<&>": 6}.Hash()
	if h1 != h2 || h1 == h3 {
		t.Fatalf("hash: zero entries must not count, seqs must: %s %s %s", h1, h2, h3)
	}
	empty, _ := Frontier{}.Hash()
	if empty == h1 || empty.IsZero() {
		t.Fatalf("empty frontier hash %s", empty)
	}
}

func TestFrontierDecodeRejects(t *testing.T) {
	jsonCases := []string{
		`[]`, `{"a":1,"a":2}`, `{"a":-1}`, `{"a":1.5}`, `{"a":1e3}`, `{"a":"1"}`, `{"a":null}`,
		`{"":1}`, `{"a\u0000":1}`, `{"a":18446744073709551616}`, `{"a":1} {}`, `{"a":1`, ``,
	}
	for _, s := range jsonCases {
		var f Frontier
		if err := json.Unmarshal([]byte(s), &f); errs.CodeOf(err) != errs.CodeInvalidInput {
			// encoding/json rejects some inputs itself before our decoder runs.
			if err == nil {
				t.Errorf("JSON %q accepted as %v", s, f)
			}
		}
		if err := f.UnmarshalJSON([]byte(s)); errs.CodeOf(err) != errs.CodeInvalidInput {
			t.Errorf("UnmarshalJSON(%q) = %v, want INPUT_001", s, err)
		}
	}
	good, _ := Frontier{"a": 1, "b": 2}.MarshalBinary()
	binCases := map[string][]byte{
		"empty":     {},
		"truncated": good[:len(good)-1],
		"trailing":  append(append([]byte(nil), good...), 0),
		"unsorted":  {0, 0, 0, 2, 1, 'b', 0, 0, 0, 0, 0, 0, 0, 1, 1, 'a', 0, 0, 0, 0, 0, 0, 0, 1},
		"repeated":  {0, 0, 0, 2, 1, 'a', 0, 0, 0, 0, 0, 0, 0, 1, 1, 'a', 0, 0, 0, 0, 0, 0, 0, 1},
		"zero seq":  {0, 0, 0, 1, 1, 'a', 0, 0, 0, 0, 0, 0, 0, 0},
		"empty id":  {0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1},
		"huge cnt":  {0xff, 0xff, 0xff, 0xff, 1, 'a'},
	}
	for name, b := range binCases {
		var f Frontier
		if err := f.UnmarshalBinary(b); errs.CodeOf(err) != errs.CodeInvalidInput {
			t.Errorf("%s: UnmarshalBinary(%x) = %v, want INPUT_001", name, b, err)
		}
	}
	if _, err := (Frontier{"bad\x01": 1}).MarshalBinary(); errs.CodeOf(err) != errs.CodeInvalidInput {
		t.Errorf("invalid id encoded: %v", err)
	}
}

func TestFrontierCompare(t *testing.T) {
	f := Frontier{"a": 3, "b": 5}
	g := Frontier{"a": 3, "b": 6, "c": 1}
	h := Frontier{"a": 4}
	if !g.Covers(f) || f.Covers(g) || !f.LessOrEqual(g) || g.LessOrEqual(f) {
		t.Fatal("f < g expected")
	}
	if h.Covers(f) || f.Covers(h) {
		t.Fatal("f and h are incomparable")
	}
	if !f.Equal(Frontier{"b": 5, "a": 3, "z": 0}) || !f.Covers(Frontier{}) {
		t.Fatal("equality ignores zero entries")
	}
	if !f.Contains("a", 1) || !f.Contains("a", 3) || f.Contains("a", 4) || f.Contains("a", 0) || f.Contains("c", 1) {
		t.Fatal("Contains")
	}
	if f.Total() != 8 {
		t.Fatalf("Total %d", f.Total())
	}
}

// A frontier file that is not UTF-8, or spells a lone UTF-16 surrogate in an
// anchor id, names no anchor: encoding/json would silently read either as
// U+FFFD and so name another, legal anchor ("\ufffd"). It is malformed input
// (CONTRACT §9: INPUT_001), as the importer treats such strings. A
// U+FFFD written as such, literally or escaped, or a surrogate pair, is an
// ordinary character.
func TestFrontierJSONRefusesMadeUpReplacementCharacters(t *testing.T) {
	for _, in := range []string{
		"{\"\xff\":1}",
		`{"\ud800":1}`,
		`{"a\udc00b":1}`,
		`{"\ud800\ud800":1}`,
		`{"\ufffd":1,"\ud800":2}`,
		"{\"\uFFFD\":1,\"x\\ud800\":2}",
	} {
		var f Frontier
		if err := f.UnmarshalJSON([]byte(in)); errs.CodeOf(err) != errs.CodeInvalidInput {
			t.Errorf("%q: decoded as %v (%v), want INPUT_001", in, f, err)
		}
	}
	for in, want := range map[string]string{
		`{"\ufffd":1}`:       "\uFFFD",
		`{"\uFFFD":1}`:       "\uFFFD",
		"{\"\uFFFD\":1}":     "\uFFFD",
		`{"\ud83d\ude00":1}`: "\U0001F600",
		`{"\\ud800":1}`:      `\ud800`,
	} {
		var f Frontier
		if err := f.UnmarshalJSON([]byte(in)); err != nil || f[want] != 1 || len(f) != 1 {
			t.Errorf("%q: %v %v, want {%q: 1}", in, f, err, want)
		}
	}
}
