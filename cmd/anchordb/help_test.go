package main

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestMainUsageColumns keeps the command list of `anchordb help` readable
// on an ordinary terminal: one long synopsis (prove's) once pushed every
// summary past column 100. A synopsis wider than the column goes on a line
// of its own, its summary on the next; every summary starts in one column.
func TestMainUsageColumns(t *testing.T) {
	lines := strings.Split(mainUsage(), "\n")
	col := -1
	for _, c := range commands {
		usage := strings.TrimSpace(c.name + " " + c.args)
		i := -1
		for j, l := range lines {
			if strings.HasPrefix(l, "  "+usage) {
				i = j
				break
			}
		}
		if i < 0 {
			t.Fatalf("help lists no %q", usage)
		}
		l := lines[i]
		if strings.TrimSpace(l) == usage { // the summary is on the next line
			l = lines[i+1]
		}
		k := strings.Index(l, c.summary)
		if k < 0 {
			t.Fatalf("%q: summary %q not on its line or the next:\n%s", usage, c.summary, l)
		}
		at := utf8.RuneCountInString(l[:k])
		if col < 0 {
			col = at
		}
		if at != col {
			t.Errorf("%q: summary at column %d, others at %d", usage, at, col)
		}
	}
	if col > 2+usageColumn+2 {
		t.Errorf("summaries start at column %d, past %d", col, 2+usageColumn+2)
	}
}
