package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// The README is the first thing a user runs. These tests run its Go program
// and its command-line tour exactly as they stand in README.md, so neither
// can drift from the API or the CLI unnoticed.

// readmeBlock returns the body of the first fenced block of the given
// language in README.md after marker ("" for the first in the file).
func readmeBlock(t *testing.T, marker, lang string) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if marker != "" {
		i := strings.Index(s, marker)
		if i < 0 {
			t.Fatalf("README.md has no %q", marker)
		}
		s = s[i:]
	}
	open := "```" + lang + "\n"
	i := strings.Index(s, open)
	if i < 0 {
		t.Fatalf("README.md has no ```%s block after %q", lang, marker)
	}
	s = s[i+len(open):]
	j := strings.Index(s, "```")
	if j < 0 {
		t.Fatalf("README.md's ```%s block after %q is not closed", lang, marker)
	}
	return s[:j]
}

func goTool() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestReadmeGoExample builds the README's Go program against this module
// (through -overlay, as a package main the go command believes is in the
// tree, so nothing is written into the repository) and runs it in an empty
// directory; its output must say what the README's comments say it does.
func TestReadmeGoExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and links a program")
	}
	src := readmeBlock(t, "## Using it", "go")
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
		"Replace": {filepath.Join(root, "internal", "readmeexample", "main.go"): mainGo},
	})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(tmp, "example")
	build := exec.Command(goTool(), "build", "-overlay", overlayFile, "-o", exe, "./internal/readmeexample")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the README's Go example does not build: %v\n%s", err, out)
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
		t.Fatalf("the README's Go example fails: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	want := []string{
		`^device-17 1 1 false$`,
		`^2 true$`,
		`^firmware = 2\.4\.1 \(device-17 #1\)$`,
		`^1 put blake3:[0-9a-f]{64}$`,
		`^2 TELEMETRY blake3:[0-9a-f]{64}$`,
		`^INPUT_001 true$`,
	}
	got := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("the README's Go example printed %d lines, its comments promise %d:\n%s", len(got), len(want), stdout.String())
	}
	for i, re := range want {
		if !regexp.MustCompile(re).MatchString(got[i]) {
			t.Errorf("line %d: %q, the README's comment says %s", i+1, got[i], re)
		}
	}
	if !fileExists(filepath.Join(work, "anchordb-data", "DBID")) {
		t.Errorf("the example made no database in ./anchordb-data, where the README says it does")
	}
}

// TestReadmeTour runs the README's command-line tour (the ```sh block after
// the "readme_test: tour" marker) line by line in bash with -e, in an empty
// directory, with the anchordb under test first on PATH: every command must
// exit 0.
func TestReadmeTour(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	script := readmeBlock(t, "<!-- readme_test: tour -->", "sh")
	dir := t.TempDir()
	cmd := exec.Command(bash, "-euo", "pipefail", "-x", "-c", script)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ANCHORDB_DIR=") && !strings.HasPrefix(kv, "PATH=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "PATH="+filepath.Dir(binary)+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's tour fails: %v\n%s", err, out)
	}
}
