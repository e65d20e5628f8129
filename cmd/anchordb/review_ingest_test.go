package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestReviewIngestCLIForkAndRepeat: the CLI's ingest end to end — a fork is
// STATE_002, exit 1, with both heads and nothing joined; a clean ingest
// joins, and an anchor named twice is joined once.
func TestReviewIngestCLIForkAndRepeat(t *testing.T) {
	tmp := t.TempDir()
	a, b := filepath.Join(tmp, "a"), filepath.Join(tmp, "b")
	mustRun(t, "--dir", a, "put", "x", "k", "from-a")
	mustRun(t, "--dir", a, "put", "y", "k", "from-a")
	mustRun(t, "--dir", b, "put", "x", "k", "from-b")
	r := runCLI(t, "--dir", b, "--json", "ingest", "--from", a)
	wantCode(t, r, 1)
	e := errObj(t, r, "STATE_002")
	ours, _ := e["ours"].(map[string]any)
	theirs, _ := e["theirs"].(map[string]any)
	if ours == nil || theirs == nil || ours["hash"] == theirs["hash"] {
		t.Fatalf("fork without both heads: %v", r)
	}
	r = runCLI(t, "--dir", b, "--json", "log", "y")
	if r.code != 1 || !strings.Contains(r.stdout, "STATE_003") {
		t.Fatalf("a refused ingest joined anchor y (its log should be STATE_003, an unknown anchor): %v", r)
	}
	r = mustRun(t, "--dir", b, "--json", "ingest", "--from", a, "--anchor", "y", "--anchor", "y")
	if m := obj(t, r.stdout); m["appended"] == nil || m["appended"].(interface{ String() string }).String() != "1" {
		t.Fatalf("ingest of y named twice: %v", r)
	}
}
