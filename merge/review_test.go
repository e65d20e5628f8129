package merge

import (
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
)

// A frontier file that is not UTF-8, or spells a lone UTF-16 surrogate in an
// anchor id, names no anchor: encoding/json would silently read either as
// U+FFFD and so name another, legal anchor ("\ufffd"). It is malformed input
// (SPEC §9: INPUT_001), as the importer already treats such strings. A
// U+FFFD written as such, literally or escaped, or a surrogate pair, is an
// ordinary character.
func TestReviewFrontierJSONRefusesMadeUpReplacementCharacters(t *testing.T) {
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
