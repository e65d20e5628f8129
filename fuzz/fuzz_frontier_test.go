package fuzz

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/merge"
)

// FuzzFrontierDecode: a frontier arrives from the user as JSON (`merge
// --frontier F`, `get --at F`) and as its binary encoding. Oracles: never
// panic; a refusal is INPUT_001; an accepted binary encoding is the
// canonical one, byte for byte; an accepted JSON frontier is valid and
// round-trips through its canonical JSON; both forms agree; and an id holds
// only what the input spells: with no escape in the input, every decoded id
// is there as it is, and an id holds U+FFFD only where the input spells it
// (a decoder that reads `{"\xff":1}` or `{"\ud800":1}` as the anchor
// U+FFFD fails on both seeds).
func FuzzFrontierDecode(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"a":1}`, `{"a":1,"b":0,"é":7}`, `{"dev-1":18446744073709551615}`,
		`{"a":1,"a":2}`, `{"a":-1}`, `{"a":1.5}`, `{"":1}`, `[1]`, `{"a":1} x`,
		"{\"\xff\":1}", `{"\ud800":1}`, `{"\ufffd":1}`, `{"\\ufffd":1}`, `{"a\u0000":1}`,
	} {
		f.Add([]byte(s))
	}
	for _, fr := range []merge.Frontier{{}, {"a": 1}, {"Z": 3, "a": 1, "é": 2}} {
		b, err := fr.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0, 0, 0, 2, 1, 'b', 0, 0, 0, 0, 0, 0, 0, 1, 1, 'a', 0, 0, 0, 0, 0, 0, 0, 1}) // unsorted
	f.Fuzz(func(t *testing.T, b []byte) {
		refused := func(form string, err error) {
			t.Helper()
			var e *errs.Error
			if !errors.As(err, &e) || e.Code != errs.CodeInvalidInput {
				t.Fatalf("%s %q refused with %v, want INPUT_001", form, b, err)
			}
		}
		var bin merge.Frontier
		if err := bin.UnmarshalBinary(b); err != nil {
			refused("binary", err)
		} else {
			again, err := bin.MarshalBinary()
			if err != nil || !bytes.Equal(again, b) {
				t.Fatalf("binary %q decoded to %v, which encodes to %q (%v): not canonical", b, bin, again, err)
			}
			j, err := bin.MarshalJSON()
			if err != nil {
				t.Fatalf("binary %q decoded to %v, which has no JSON form: %v", b, bin, err)
			}
			var back merge.Frontier
			if err := back.UnmarshalJSON(j); err != nil || !back.Equal(bin) {
				t.Fatalf("binary %q: its JSON %s reads back as %v (%v)", b, j, back, err)
			}
		}

		var fr merge.Frontier
		if err := fr.UnmarshalJSON(b); err != nil {
			refused("JSON", err)
			return
		}
		if err := fr.Validate(); err != nil {
			t.Fatalf("JSON %q accepted as an invalid frontier %v: %v", b, fr, err)
		}
		if !utf8.Valid(b) {
			t.Fatalf("JSON %q is not UTF-8, yet was accepted as %v", b, fr)
		}
		spellsReplacement := bytes.Contains(b, []byte("\uFFFD")) || bytes.Contains(bytes.ToLower(b), []byte(`\ufffd`))
		for _, a := range fr.Anchors() {
			if strings.ContainsRune(a, utf8.RuneError) && !spellsReplacement {
				t.Fatalf("JSON %q decoded an anchor %q holding U+FFFD, which the input does not spell", b, a)
			}
		}
		if !bytes.ContainsRune(b, '\\') {
			for _, a := range fr.Anchors() {
				if !bytes.Contains(b, []byte(a)) {
					t.Fatalf("JSON %q, with no escapes, decoded an anchor %q it does not hold", b, a)
				}
			}
		}
		canon, err := fr.MarshalJSON()
		if err != nil {
			t.Fatalf("JSON %q decoded to %v, which does not encode: %v", b, fr, err)
		}
		var back merge.Frontier
		if err := back.UnmarshalJSON(canon); err != nil || !back.Equal(fr) {
			t.Fatalf("JSON %q: canonical form %s reads back as %v (%v)", b, canon, back, err)
		}
		enc, err := fr.MarshalBinary()
		if err != nil {
			t.Fatalf("JSON %q decoded to %v, which has no binary form: %v", b, fr, err)
		}
		var viaBin merge.Frontier
		if err := viaBin.UnmarshalBinary(enc); err != nil || !viaBin.Equal(fr) {
			t.Fatalf("JSON %q: binary form %x reads back as %v (%v)", b, enc, viaBin, err)
		}
	})
}
