package jsonobj

import "testing"

func TestSpelledReplacements(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{
		{`"a"`, 0},
		{"\"\uFFFD\"", 1},
		{`"\ufffd"`, 1},
		{`"\uFFFD\uFfFd"`, 2},
		{`"\\ufffd"`, 0},  // an escaped backslash, then text
		{`"\\\ufffd"`, 1}, // an escaped backslash, then the escape
		{`"\ud800"`, 0},   // decodes to U+FFFD, spells none
		{`"\u00e9\n"`, 0}, // other escapes
		{"{\"\uFFFD\":1}", 1},
	} {
		if got := SpelledReplacements([]byte(c.in)); got != c.want {
			t.Errorf("SpelledReplacements(%s) = %d, want %d", c.in, got, c.want)
		}
	}
}
