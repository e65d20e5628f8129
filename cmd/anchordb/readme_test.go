package main

import (
	"bytes"
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

// TestReadmeGoExample follows the README's "Using it" as a new user does:
// it runs the README's module lines (a module beside a checkout, here a link
// to this tree, and a Go workspace holding both), saves the README's
// program as main.go, builds it there, and runs it twice in that directory.
// Each run must print what the README's comments say, and leave nothing
// behind: a second run finds no database of the first.
func TestReadmeGoExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and links a program")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	if err := os.Symlink(root, filepath.Join(tmp, "anchordb")); err != nil {
		t.Fatal(err)
	}
	// The go command of this test, offline: everything the module needs is
	// in the module cache already.
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "GOWORK", "GOFLAGS", "GOPROXY", "PATH", "TMPDIR":
		default:
			env = append(env, kv)
		}
	}
	tmpdir := filepath.Join(tmp, "tmp")
	if err := os.Mkdir(tmpdir, 0o755); err != nil {
		t.Fatal(err)
	}
	env = append(env, "GOPROXY=off", "GOFLAGS=", "TMPDIR="+tmpdir,
		"PATH="+filepath.Dir(goTool())+string(os.PathListSeparator)+os.Getenv("PATH"))

	setup := exec.Command(bash, "-euo", "pipefail", "-c", readmeBlock(t, "<!-- readme_test: module -->", "sh"))
	setup.Dir, setup.Env = tmp, env
	if out, err := setup.CombinedOutput(); err != nil {
		t.Fatalf("the README's module lines fail: %v\n%s", err, out)
	}
	work := filepath.Join(tmp, "example")
	if err := os.WriteFile(filepath.Join(work, "main.go"), []byte(readmeBlock(t, "## Using it", "go")), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(tmp, "example-bin")
	build := exec.Command(goTool(), "build", "-o", exe, ".")
	build.Dir, build.Env = work, env
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the README's Go example does not build: %v\n%s", err, out)
	}
	want := []string{
		`^device-17 1 1 false$`,
		`^2 true$`,
		`^firmware = 2\.4\.1 \(device-17 #1\)$`,
		`^1 put \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ blake3:[0-9a-f]{64}$`,
		`^2 TELEMETRY \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ blake3:[0-9a-f]{64}$`,
		`^\{"temp":21\.5\} 5 6$`,
		`^INPUT_001 true$`,
	}
	before := dirNames(t, work)
	for run := 1; run <= 2; run++ {
		cmd := exec.Command(exe)
		cmd.Dir, cmd.Env = work, env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("run %d of the README's Go example fails: %v\nstdout:\n%s\nstderr:\n%s", run, err, stdout.String(), stderr.String())
		}
		got := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
		if len(got) != len(want) {
			t.Fatalf("run %d of the README's Go example printed %d lines, its comments promise %d:\n%s", run, len(got), len(want), stdout.String())
		}
		for i, re := range want {
			if !regexp.MustCompile(re).MatchString(got[i]) {
				t.Errorf("run %d, line %d: %q, the README's comment says %s", run, i+1, got[i], re)
			}
		}
		if after := dirNames(t, work); after != before {
			t.Errorf("run %d left files in its directory: %s, was %s", run, after, before)
		}
		if left := dirNames(t, tmpdir); left != "" {
			t.Errorf("run %d left %s in its temporary directory", run, left)
		}
	}
}

// dirNames lists the names in dir, sorted, as one string.
func dirNames(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return strings.Join(names, " ")
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
	// The tour's database is healthy: an integrity code anywhere in what
	// it prints (as rebuild-index --from-snapshot printed INT_004 when it
	// fell back to a full replay) is a false alarm.
	if m := regexp.MustCompile(`(INT|AUTH)_\d{3}`).Find(out); m != nil {
		t.Fatalf("the README's tour, on a healthy database, prints %s:\n%s", m, out)
	}
}
