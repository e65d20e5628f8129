package main

import (
	"strings"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine"
)

// TestUnsnapshottedText: the oldest unsnapshotted record dated after now
// (the clock went back) has no age to print; "0s old" would say it was
// written this instant.
func TestUnsnapshottedText(t *testing.T) {
	for _, c := range []struct {
		st   engine.Stats
		want string
	}{
		{engine.Stats{}, "0 records"},
		{engine.Stats{RecordsUnsnapshotted: 3, OldestUnsnapshottedAge: 90 * time.Second}, "3 records, the oldest 1m30s old"},
		{engine.Stats{RecordsUnsnapshotted: 3, OldestUnsnapshottedAfterNow: true}, "3 records, the oldest dated after now"},
	} {
		if got := unsnapshottedText(c.st); !strings.HasPrefix(got, c.want) {
			t.Errorf("%+v: %q; want it to start %q", c.st, got, c.want)
		}
	}
}
