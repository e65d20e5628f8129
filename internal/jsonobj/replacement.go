package jsonobj

import (
	"strings"
	"unicode/utf8"
)

// SpelledReplacements counts the U+FFFD that JSON text spells: the literal
// character and the escapes \ufffd (any case), an escaped backslash being
// skipped whole so that "\\ufffd" is not counted.
//
// encoding/json decodes bytes that are not UTF-8, and a lone or unpaired
// UTF-16 surrogate escape ("\ud800"), as U+FFFD without an error. A reader
// that takes strings as names (an anchor id, a key) checks, on text it knows
// is valid UTF-8, that the decoded strings hold no more U+FFFD than this: a
// name made up by the decoder would name something else.
func SpelledReplacements(b []byte) int {
	n := 0
	for i := 0; i < len(b); {
		if b[i] == '\\' && i+1 < len(b) {
			if b[i+1] == 'u' && i+6 <= len(b) && strings.EqualFold(string(b[i+2:i+6]), "fffd") {
				n++
				i += 6
			} else {
				i += 2 // \\, \", \n, … and the first two bytes of other \uXXXX
			}
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 3 {
			n++
		}
		i += size
	}
	return n
}
