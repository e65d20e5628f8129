package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A --dir that names a regular file is INPUT_001 "not a directory", for
// the commands that create a database and for those that read one: it was
// IO_001 advising to remove a lock file under it.
func TestDirThatIsAFileIsNotADirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"put", "a", "k", "v"}, {"stats"}, {"verify"}, {"log", "a"},
	} {
		for _, dir := range []string{file, filepath.Join(file, "db")} {
			r := runCLI(t, append(args, "--json", "--dir", dir)...)
			wantExit(t, r, 2)
			if e := errObj(t, r, "INPUT_001"); !strings.Contains(str(t, e, "message"), "not a directory") {
				t.Errorf("%v --dir %s: %v", args, dir, r)
			}
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "x" {
		t.Errorf("the file was changed: %q %v", b, err)
	}
}

// The engine's log lines reach stderr with one "anchordb: " in front, not
// two: here the line that damage found by a read makes the anchor
// read-only.
func TestEngineLogLinesHaveOnePrefix(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	mustRun(t, "put", "a", "k", "v", "--dir", dir)
	seg := filepath.Join(segment.AnchorDir(vfs.Default, dir, "a"), segment.FileName(1))
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0xff // the record's hash
	if err := os.WriteFile(seg, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "log", "a", "--dir", dir)
	wantExit(t, r, 1)
	if !strings.Contains(r.stderr, "read-only") {
		t.Fatalf("no line says the anchor became read-only: %v", r)
	}
	if strings.Contains(r.stderr, "anchordb: anchordb:") {
		t.Errorf("a doubled prefix: %v", r)
	}
}

// A flag value or an import field that does not parse is said in words,
// never in the text of the Go function that parsed it ("strconv.ParseUint:
// parsing …: invalid syntax", a time layout string).
func TestNoRawParserTexts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	mustRun(t, "put", "a", "k", "v", "--dir", dir)
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(bad, []byte(`{"anchor":"a","key":"k","value":"v","time":"yesterday"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	raw := regexp.MustCompile(`strconv|invalid syntax|value out of range|parsing time|2006-01-02T15`)
	for _, args := range [][]string{
		{"log", "a", "--from", "abc"},
		{"log", "a", "--to", "-1"},
		{"put", "a", "k", "v", "--counter", "99999999999999999999999"},
		{"scan", "--limit", "x"},
		{"verify", "--threads", "1.5"},
		{"stats", "--json=maybe"},
		{"import", bad},
	} {
		r := runCLI(t, append(args, "--dir", dir)...)
		wantExit(t, r, 2)
		if raw.MatchString(r.stderr) || !strings.Contains(r.stderr, "INPUT_001") {
			t.Errorf("%v: %s", args, r.stderr)
		}
	}
}

// oneNouns matches a count of one with a plural noun: "1 records".
var oneNouns = regexp.MustCompile(`(^|[^0-9.,])1 [a-z]+s\b`)

// Counts of one read "1 writer", "1 record": the demo, import, ingest,
// verify, snapshot, stats and merge --root said "1 writers", "imported 1
// records".
func TestCountsOfOneAreSingular(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "db")
	line := filepath.Join(tmp, "one.jsonl")
	if err := os.WriteFile(line, []byte(`{"anchor":"a","key":"k","value":"v"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(tmp, "other")
	mustRun(t, "put", "b", "k2", "v", "--dir", other)
	var out []string
	for _, args := range [][]string{
		{"demo", "--writers", "1", "--anchors", "1", "--records", "1", "--dir", filepath.Join(tmp, "demo")},
		{"import", line, "--dir", dir},
		{"verify", "--dir", dir},
		{"ingest", "--from", other, "--anchor", "b", "--dir", dir},
		{"snapshot", "create", "--dir", dir},
		{"snapshot", "verify", "--dir", dir},
		{"merge", "--root", "--frontier", "-", "--dir", dir},
		{"stats", "--dir", dir},
		{"rebuild-index", "--dir", dir},
	} {
		var r result
		if args[0] == "merge" {
			r = cli(t, []byte(`{"a":1}`), args)
		} else {
			r = mustRun(t, args...)
		}
		out = append(out, r.stdout)
	}
	for _, o := range out {
		for _, l := range strings.Split(o, "\n") {
			if m := oneNouns.FindString(l); m != "" {
				t.Errorf("%q in %q", strings.TrimSpace(m), l)
			}
		}
	}
}

// `anchordb version` and `anchordb --version` print the module and its
// version as the build recorded them, and the format versions this build
// writes and reads; no database is needed.
func TestVersion(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "none")
	text := mustRun(t, "version", "--dir", dir).stdout
	if got := mustRun(t, "--version").stdout; got != text {
		t.Fatalf("--version printed\n%s\nversion printed\n%s", got, text)
	}
	if !strings.HasPrefix(text, "anchordb github.com/anchordb/anchordb ") || !strings.Contains(text, "segment ") || !strings.Contains(text, "writes 2, reads 2") {
		t.Fatalf("version:\n%s", text)
	}
	m := obj(t, mustRun(t, "--json", "--version").stdout)
	if str(t, m, "module") != "github.com/anchordb/anchordb" || str(t, m, "version") == "" || !strings.HasPrefix(str(t, m, "go"), "go") {
		t.Fatalf("version --json: %v", m)
	}
	formats := map[string]string{}
	for _, f := range m["formats"].([]any) {
		f := f.(map[string]any)
		formats[str(t, f, "format")] = str(t, f, "writes")
	}
	for name, want := range map[string]string{"record": "1", "segment": "1", "stub": "1", "snapshot": "1", "index": "2", "policy": "v1"} {
		if formats[name] != want {
			t.Errorf("format %s writes %q, want %q (%v)", name, formats[name], want, formats)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("version made %s: %v", dir, err)
	}
}
