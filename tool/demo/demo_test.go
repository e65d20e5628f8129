package demo

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
)

// TestRunChecksEverything: a small demo in a directory of the test's
// passes every check, names each in its order, and leaves the database
// and its checkpoint key in the directory.
func TestRunChecksEverything(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	r, err := Run(context.Background(), Config{Writers: 3, Anchors: 4, Records: 60, SegmentSize: 2048, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range r.Checks {
		names = append(names, c.Name)
		if !c.OK {
			t.Errorf("check %q failed: %s", c.Name, c.Detail)
		}
	}
	want := []string{"chains", "receipts", "merged reads", "close", "reopen", "chains after reopen",
		"receipts after reopen", "merged reads after reopen", "verify", "merge", "checkpoint", "inclusion proof",
		"snapshot", "compact", "state after compaction", "verify after compaction", "snapshots and audit log",
		"idempotency after compaction", "rebuild", "state after rebuild", "verify after rebuild",
		"idempotency after rebuild", "close after rebuild"}
	if !slices.Equal(names, want) {
		t.Errorf("checks %q, want %q", names, want)
	}
	if !r.OK || r.Dir != dir || !r.Kept || r.Written != 180 || r.Records == 0 || r.SegmentsRemoved == 0 {
		t.Errorf("report %+v", r)
	}
	if _, err := os.Stat(filepath.Join(dir, "demo-checkpoint.pub")); err != nil {
		t.Errorf("the verifier key is not beside the database: %v", err)
	}
}

// TestRunRefusesABadConfig: a Config out of its limits, or a directory
// that is not empty, is INPUT_001 before anything is written.
func TestRunRefusesABadConfig(t *testing.T) {
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]Config{
		"no writers":         {Writers: 0, Anchors: 1, Records: 1},
		"too many anchors":   {Writers: 1, Anchors: MaxAnchors + 1, Records: 1},
		"too many writes":    {Writers: MaxWriters, Anchors: 1, Records: MaxWrites/MaxWriters + 1},
		"tiny segments":      {Writers: 1, Anchors: 1, Records: 1, SegmentSize: MinSegmentSize - 1},
		"a directory in use": {Writers: 1, Anchors: 1, Records: 1, Dir: full},
	} {
		if _, err := Run(context.Background(), cfg); errs.CodeOf(err) != errs.CodeInvalidInput {
			t.Errorf("%s: %v, want INPUT_001", name, err)
		}
	}
	if names, _ := os.ReadDir(full); len(names) != 1 {
		t.Errorf("the directory in use was written to: %v", names)
	}
}
