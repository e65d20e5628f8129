package engine

import (
	"testing"
)

// TestIndexCorruptMarkerOutlivesAFailedRebuild: the INDEX-CORRUPT marker is
// removed only once the rebuilt index has passed the gate. A corruption
// reported while the second try runs fails Open (INT_004) and leaves the
// marker, so the next Open rebuilds again instead of trusting the index the
// failed try left.
func TestIndexCorruptMarkerOutlivesAFailedRebuild(t *testing.T) {
	mem, _, _ := closedWithManifest(t)
	db := mustOpen(t, mem, crashOptions(mem, false))
	raiseCorruption(db)
	_ = db.Close()
	// The first try never creates a journal file (the marker moves the
	// index aside before any recovery): the corruption meets the second.
	_, o := corruptionOnJournalCreate(mem)
	_, err := Open("db", o)
	if err == nil {
		t.Fatal("scenario: the second try did not fail")
	}
	if _, serr := mem.Stat("db/" + IndexCorruptMarker); serr != nil {
		t.Fatalf("Open failed (%v) on a corruption of the rebuilt index, and the marker that would make the next Open rebuild it is gone: %v", err, serr)
	}
}
