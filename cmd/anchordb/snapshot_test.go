package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSnapshotListSaysWhatIsAudited: each readable snapshot says whether
// the audit log records it as the database's ("audited"; an AUDITED
// column). Listing every well-formed file in snapshots/ alike would make a
// file dropped there look like one of the database's snapshots, which
// compaction would count.
func TestSnapshotListSaysWhatIsAudited(t *testing.T) {
	dir := t.TempDir()
	fillDB(t, dir, []string{"dev-1"}, 10)
	own := str(t, obj(t, mustRun(t, "--dir", dir, "--json", "snapshot", "create").stdout), "path")
	data, err := os.ReadFile(own)
	if err != nil {
		t.Fatal(err)
	}
	// The same bytes under another name: not a snapshot the log records.
	copyName := "snapshot-00000000000000000001-0000000000000000.snap"
	if err := os.WriteFile(filepath.Join(filepath.Dir(own), copyName), data, 0o644); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, l := range lines(t, mustRun(t, "--dir", dir, "--json", "snapshot", "list").stdout) {
		a, ok := l["audited"].(bool)
		if !ok {
			t.Fatalf("no \"audited\" in %v", l)
		}
		got[str(t, l, "name")] = a
	}
	if len(got) != 2 || !got[filepath.Base(own)] || got[copyName] {
		t.Fatalf("audited: %v; want %s true and %s false", got, filepath.Base(own), copyName)
	}
	out := mustRun(t, "--dir", dir, "snapshot", "list").stdout
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, copyName) && !strings.HasSuffix(strings.TrimSpace(l), "NO") {
			t.Errorf("the copy's row does not say NO: %q", l)
		}
		if strings.HasPrefix(l, filepath.Base(own)) && !strings.HasSuffix(strings.TrimSpace(l), "yes") {
			t.Errorf("the database's own row does not say yes: %q", l)
		}
	}
	if !strings.Contains(out, "not in the audit log") {
		t.Errorf("the table does not say what AUDITED NO means:\n%s", out)
	}
}
