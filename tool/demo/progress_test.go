package demo

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// A demo phase that runs longer than a second is drawn, by name, with its
// time; a shorter one is not, and the line is cleared when the phase ends.
func TestDemoPhaseProgress(t *testing.T) {
	var buf bytes.Buffer
	p := &phaseProgress{prog: statusLine{&buf}}
	end := p.step("verify after compaction")
	start := p.start
	p.tick(start.Add(500 * time.Millisecond))
	if buf.Len() != 0 {
		t.Fatalf("a phase of half a second was drawn: %q", buf.String())
	}
	p.tick(start.Add(3500 * time.Millisecond))
	if !strings.Contains(buf.String(), "demo: verify after compaction… 3s") {
		t.Fatalf("a phase of 3.5 s drawn as %q", buf.String())
	}
	buf.Reset()
	end()
	if buf.String() != "(cleared)" {
		t.Fatalf("the line was not cleared when the phase ended: %q", buf.String())
	}
	buf.Reset()
	p.tick(start.Add(10 * time.Second))
	if buf.Len() != 0 {
		t.Fatalf("drawn between phases: %q", buf.String())
	}
}

// statusLine draws on a buffer what a terminal's status line shows.
type statusLine struct{ w *bytes.Buffer }

func (s statusLine) Update(format string, args ...any) { fmt.Fprintf(s.w, format, args...) }
func (s statusLine) Done()                             { s.w.WriteString("(cleared)") }
