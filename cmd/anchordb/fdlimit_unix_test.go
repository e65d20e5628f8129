//go:build unix

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestImportUnderDescriptorLimit: under `ulimit -n 256` (soft and hard),
// importing 10,000 records onto 5,000 anchors succeeds and every record is
// there. The segment file cache used to default to 256 descriptors, took
// them all, and the first open that failed stopped every write: IO_001
// "the database stopped accepting writes".
func TestImportUnderDescriptorLimit(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("needs sh for ulimit")
	}
	base := t.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		// Descriptors are the point, not 10,000 fsyncs on a disk.
		if d, err := os.MkdirTemp("/dev/shm", "anchordb-cli-test-"); err == nil {
			base = d
			t.Cleanup(func() { _ = os.RemoveAll(d) })
		}
	}
	dir := filepath.Join(base, "db")
	var lines strings.Builder
	for i := 0; i < 10_000; i++ {
		fmt.Fprintf(&lines, `{"anchor":"dev-%04d","key":"k%d","value":"v%d"}`+"\n", i%5000, i, i)
	}
	in := filepath.Join(base, "in.jsonl")
	if err := os.WriteFile(in, []byte(lines.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `ulimit -n 256 && exec "$0" --dir "$1" import "$2" --json`, binary, dir, in)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("import under ulimit -n 256: %v\n%s", err, out)
	}
	if m := obj(t, string(out)); fmt.Sprint(m["imported"]) != "10000" {
		t.Fatalf("import under ulimit -n 256: %s", out)
	}
	r := mustRun(t, "--dir", dir, "stats", "--json")
	if m := obj(t, r.stdout); fmt.Sprint(m["anchors"]) != "5000" || fmt.Sprint(m["records"]) != "10000" {
		t.Fatalf("stats after the import: %s", r.stdout)
	}
	mustRun(t, "--dir", dir, "verify")
}
