package engine

import (
	"testing"

	"github.com/anchordb/anchordb/internal/testutil"
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
		"TamperedRowAboveHistoryFrom":  {TestVerifyNamesOnlyTheTamperedRowAboveTheRebuiltState, true},
		"IncrementalVerifyInsideAStub": {TestIncrementalVerifyInsideAStubAfterRebuild, false},
		"IndexDamage":                  {TestVerifyIndexDamage, true},
	} {
		if testutil.RaceEnabled && !test.race {
			continue
		}
		t.Run(name, test.run)
	}
}
