package errs

import (
	"errors"
	"fmt"
	"testing"
)

// TestMessage: Message drops every "CODE reason: " a coded error prints,
// however deep, and nothing else.
func TestMessage(t *testing.T) {
	inner := New(CodeHashMismatch, "record seq 7: stored hash differs")
	cases := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errors.New("plain"), "plain"},
		{New(CodeSnapshotCorrupted, "snapshot s: footer"), "snapshot s: footer"},
		{&Error{Code: CodeChainBroken}, ""},
		{Wrap(CodeIndexMismatch, inner, "'k' row"), "'k' row: record seq 7: stored hash differs"},
		{fmt.Errorf("stored checkpoint: %w", inner), "stored checkpoint: record seq 7: stored hash differs"},
		// Not a code of SPEC §8 with its own reason: kept.
		{errors.New("INT_001 chain_broken: x"), "INT_001 chain_broken: x"},
		{errors.New("anchor FOO_123 bar"), "anchor FOO_123 bar"},
	}
	for _, c := range cases {
		if got := Message(c.err); got != c.want {
			t.Errorf("Message(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
