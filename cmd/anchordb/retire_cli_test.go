package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The operator's way out of a damaged snapshot: verify fails until
// `snapshot retire` moves it to lost+found/ with an audit line naming the
// finding; then verify is ok. A snapshot that passes its checks is refused.
func TestSnapshotRetireCLI(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	mustRun(t, "put", "a", "k", "v", "--dir", dir)
	info := obj(t, mustRun(t, "snapshot", "create", "--json", "--dir", dir).stdout)
	name, path := str(t, info, "name"), str(t, info, "path")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	wantExit(t, runCLI(t, "verify", "--dir", dir), 1)

	mustRun(t, "put", "a", "k2", "v", "--dir", dir)
	other := obj(t, mustRun(t, "snapshot", "create", "--json", "--dir", dir).stdout)
	r := runCLI(t, "snapshot", "retire", str(t, other, "name"), "--json", "--dir", dir)
	wantExit(t, r, 2)
	errObj(t, r, "INPUT_001")

	r = mustRun(t, "snapshot", "retire", name, "--json", "--dir", dir)
	m := obj(t, r.stdout)
	f := m["finding"].(map[string]any)
	moved := str(t, m, "moved_to")
	if str(t, f, "code") != "INT_003" || !strings.Contains(moved, "lost+found") {
		t.Fatalf("retire: %v", r)
	}
	if _, err := os.Stat(moved); err != nil {
		t.Fatalf("the retired file is not in lost+found: %v", err)
	}
	audit, err := os.ReadFile(filepath.Join(dir, "audit.log"))
	if err != nil || !strings.Contains(string(audit), `"action":"retire_snapshot"`) || !strings.Contains(string(audit), "INT_003") {
		t.Fatalf("no audit line retires it: %v\n%s", err, audit)
	}
	mustRun(t, "verify", "--dir", dir)
}
