//go:build unix

package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestForeignEntryInDatabaseTree: the reproduction of the hang, through the
// CLI. A FIFO named as a segment makes rebuild-index refuse (exit 1,
// INT_002) with the index left in place and verify report a finding, and
// does not stop reads; one named as a journal file past the settle point
// makes every open refuse (INT_002): what it holds is unknown.
func TestForeignEntryInDatabaseTree(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	mustRun(t, "--dir", dir, "put", "a", "k", "v")
	anchorDirs, err := filepath.Glob(filepath.Join(dir, "anchors", "*", "*"))
	if err != nil || len(anchorDirs) != 1 {
		t.Fatalf("anchor directories %v %v", anchorDirs, err)
	}
	seg := filepath.Join(anchorDirs[0], "0000000000000002.seg")
	if err := syscall.Mkfifo(seg, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}

	r := runWithin(t, 30*time.Second, "--dir", dir, "--json", "rebuild-index", "--apply")
	wantExit(t, r, 1)
	errObj(t, r, "INT_002")
	if _, err := os.Stat(filepath.Join(dir, "index")); err != nil {
		t.Fatalf("the refused rebuild dropped the index: %v", err)
	}
	r = runWithin(t, 30*time.Second, "--dir", dir, "--json", "verify")
	wantExit(t, r, 1)
	found := false
	for _, f := range obj(t, r.stdout)["failures"].([]any) {
		m := f.(map[string]any)
		if m["code"] == "INT_002" && m["file"] == seg {
			found = true
		}
	}
	if !found {
		t.Fatalf("verify: no INT_002 finding at %s: %s", seg, r.stdout)
	}
	r = runWithin(t, 30*time.Second, "--dir", dir, "--json", "get", "k")
	wantExit(t, r, 0)

	if err := os.Remove(seg); err != nil {
		t.Fatal(err)
	}
	logs, err := filepath.Glob(filepath.Join(dir, "journal", "*.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("journal files %v %v", logs, err)
	}
	fifo := filepath.Join(dir, "journal", "00000000000000ff.log")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	r = runWithin(t, 30*time.Second, "--dir", dir, "--json", "get", "k")
	wantExit(t, r, 1)
	errObj(t, r, "INT_002")
	if err := os.Remove(fifo); err != nil {
		t.Fatal(err)
	}
	// The anchor verify found damaged stays read-only until the operator
	// rebuilds the index (CONTRACT §3, docs/RELIABILITY.md).
	r = runWithin(t, 30*time.Second, "--dir", dir, "--json", "verify")
	wantExit(t, r, 1)
	r = runWithin(t, 30*time.Second, "--dir", dir, "rebuild-index", "--apply")
	wantExit(t, r, 0)
	r = runWithin(t, 30*time.Second, "--dir", dir, "--json", "verify")
	wantExit(t, r, 0)
}
