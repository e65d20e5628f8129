package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestStatsOldestUnsnapshottedAfterTheClockWentBack: records appended
// while the clock ran a year ahead are dated a year after now once it is
// set right, and Stats gave the oldest of them a negative age (minus a
// year). A date after now says nothing about how long ago it was, as the
// compaction plan notes for its time trigger: the age is 0 and
// OldestUnsnapshottedAfterNow says it is unknown. An older record keeps
// its age.
func TestStatsOldestUnsnapshottedAfterTheClockWentBack(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	opts := fixtureOptions(fs)
	var ahead atomic.Bool
	opts.Clock = func() time.Time {
		if ahead.Load() {
			return time.Now().AddDate(1, 0, 0)
		}
		return time.Now()
	}
	db, err := Open("db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	ahead.Store(true)
	fillAnchor(t, db, "a", 5, "ahead")
	ahead.Store(false)
	st, err := db.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.RecordsUnsnapshotted != 5 || st.OldestUnsnapshottedAge != 0 || !st.OldestUnsnapshottedAfterNow {
		t.Fatalf("5 records dated a year after now: %d records, oldest age %v, after now %v; want 5, 0, true",
			st.RecordsUnsnapshotted, st.OldestUnsnapshottedAge, st.OldestUnsnapshottedAfterNow)
	}

	// A record dated now, on another anchor, is the oldest: its age holds.
	fillAnchor(t, db, "b", 1, "now")
	time.Sleep(10 * time.Millisecond)
	st, err = db.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.RecordsUnsnapshotted != 6 || st.OldestUnsnapshottedAge < 10*time.Millisecond || st.OldestUnsnapshottedAge > time.Hour || st.OldestUnsnapshottedAfterNow {
		t.Fatalf("a record dated now is the oldest: %d records, oldest age %v, after now %v; want 6, a few ms, false",
			st.RecordsUnsnapshotted, st.OldestUnsnapshottedAge, st.OldestUnsnapshottedAfterNow)
	}
}

// Stats measures the records not yet in a snapshot from a snapshot of this
// log only: one of another history with larger seqs would make every record
// look covered.
func TestStatsIgnoreASnapshotOfAnotherLog(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, _ := compactFixture(t, fs)
	defer db.Close()
	far := snapshot.Frontier{}
	for info, err := range db.Anchors(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		far[info.ID] = snapshot.Head{Seq: info.Records + 1000, Hash: info.HeadHash}
	}
	if _, err := snapshot.Create(fs, db.SnapshotsDir(), snapshot.Meta{Frontier: far}, func(func(snapshot.Entry, error) bool) {}); err != nil {
		t.Fatal(err)
	}
	st, err := db.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.RecordsUnsnapshotted != 400 {
		t.Fatalf("records not in a snapshot: %d; want all 400 (the only snapshot is not of this log)", st.RecordsUnsnapshotted)
	}
}
