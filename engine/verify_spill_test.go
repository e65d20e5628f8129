package engine

import (
	"fmt"
	"slices"
	"testing"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestVerifySpilledRows runs the verify tests that meet kept and deferred
// 'k' rows with every such row spilled to the scratch store, so the on-disk
// path finds what the in-memory one does (the tests assert the findings),
// and checks that nothing of the store is left behind.
func TestVerifySpilledRows(t *testing.T) {
	defer func(n int) { rowSpillBytes = n }(rowSpillBytes)
	rowSpillBytes = 0
	// Under the race detector only the tests that spill from a verify
	// running its checks side by side (IndexDamage) or cheaply run again:
	// the spilled path itself is single-threaded, and make test's run
	// without the detector runs every one.
	for name, test := range map[string]struct {
		run  func(*testing.T)
		race bool
	}{
		"TruncatedLog":                 {TestVerifyTruncatedLog, false},
		"HistoryFromForged":            {TestVerifyHistoryFromForged, true},
		"HistoryFromMissingRow":        {TestVerifyHistoryFromMissingRow, true},
		"HistoryFromExtraVersion":      {TestVerifyHistoryFromExtraVersion, true},
		"HistoryFromAfterRebuild":      {TestVerifyHistoryFromAfterRebuildNoFalseFindings, false},
		"TamperedRowAboveHistoryFrom":  {TestReview2VerifyTamperedRowAboveHistoryFrom, true},
		"IncrementalVerifyInsideAStub": {TestIncrementalVerifyInsideAStubAfterRebuild, false},
		"IndexDamage":                  {TestVerifyIndexDamage, true},
	} {
		if testutil.RaceEnabled && !test.race {
			continue
		}
		t.Run(name, test.run)
	}
}

// TestRowSpillOrder: in memory or spilled part way (at every threshold),
// the rows come back in (anchor, seq) order, two rows of one seq both kept,
// and closing removes the scratch store.
func TestRowSpillOrder(t *testing.T) {
	defer func(n int) { rowSpillBytes = n }(rowSpillBytes)
	type row struct {
		anchor string
		seq    uint64
		k, v   string
	}
	in := []row{
		{"b", 7, "k-b7", "v1"}, {"a", 300, "k-a300", "v2"}, {"ab", 1, "k-ab1", "v3"},
		{"a", 2, "k-a2", "v4"}, {"b", 7, "k-b7-other", "v5"}, {"a", 1 << 40, "k-big", "v6"}, {"a", 9, "k-a9", "v7"},
	}
	want := []string{"a/2/k-a2", "a/9/k-a9", "a/300/k-a300", "a/1099511627776/k-big", "ab/1/k-ab1", "b/7/k-b7", "b/7/k-b7-other"}
	for _, limit := range []int{1 << 20, 0, 200, 400} {
		fs := vfs.NewMem()
		db, err := Open("db", Options{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		rowSpillBytes = limit
		s := newRowSpill(db, "spill-test")
		for _, r := range in {
			if err := s.add([]byte(r.anchor), r.seq, []byte(r.k), []byte(r.v)); err != nil {
				t.Fatal(err)
			}
		}
		spilled := s.store != nil
		var got []string
		if err := s.each(func(r retainedRow) bool {
			ve := ""
			for _, x := range in {
				if x.k == string(r.key) {
					ve = fmt.Sprintf("%s/%d/%s", x.anchor, x.seq, x.k)
					if x.anchor != r.anchor || x.v != string(r.value) {
						t.Errorf("limit %d: row %s came back as %q = %q", limit, ve, r.anchor, r.value)
					}
				}
			}
			got = append(got, ve)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("limit %d (spilled %v): rows in order %q, want %q", limit, spilled, got, want)
		}
		if spilled != (limit < 1<<20) {
			t.Errorf("limit %d: spilled %v", limit, spilled)
		}
		s.close()
		if names, _ := fs.List("db/tmp"); len(names) != 0 {
			t.Errorf("limit %d: the scratch store was left behind: %v", limit, names)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
