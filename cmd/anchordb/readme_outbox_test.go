package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeOutboxExample builds the README's outbox service (the ```go
// block after the "readme_test: outbox" marker) against this module, as
// TestReadmeGoExample builds the first, and runs it in an empty directory:
// it must print what its comments say.
func TestReadmeOutboxExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and links a program")
	}
	src := readmeBlock(t, "<!-- readme_test: outbox -->", "go")
	tmp := t.TempDir()
	mainGo := filepath.Join(tmp, "main.go")
	if err := os.WriteFile(mainGo, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]map[string]string{
		"Replace": {filepath.Join(root, "internal", "readmeoutbox", "main.go"): mainGo},
	})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(tmp, "example")
	build := exec.Command(goTool(), "build", "-overlay", overlayFile, "-o", exe, "./internal/readmeoutbox")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the README's outbox example does not build: %v\n%s", err, out)
	}
	work := filepath.Join(tmp, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	run := exec.Command(exe)
	run.Dir = work
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	if err := run.Run(); err != nil {
		t.Fatalf("the README's outbox example fails: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	want := []string{
		`^invoice-7 pending duplicate=false$`,
		`^invoice-7 pending duplicate=true$`,
		`^delivered invoice-7$`,
		`^done 1 pending 0 dead 0$`,
	}
	got := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("the README's outbox example printed %d lines, its comments promise %d:\n%s", len(got), len(want), stdout.String())
	}
	for i, re := range want {
		if !regexp.MustCompile(re).MatchString(got[i]) {
			t.Errorf("line %d: %q, the README's comment says %s", i+1, got[i], re)
		}
	}
	// The database verifies, its outbox included.
	r := runCLI(t, "--dir", filepath.Join(work, "anchordb-data"), "--json", "verify")
	if r.code != 0 || obj(t, r.stdout)["ok"] != true {
		t.Fatalf("verify of the example's database: %v", r)
	}
}
