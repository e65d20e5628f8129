package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestIngestErrorSaysWhatWasAppended: an ingest that stops keeps what it
// joined, and its error says how much, as an import's does (the CLI keeps
// the engine's report rather than dropping it).
func TestIngestErrorSaysWhatWasAppended(t *testing.T) {
	err := fmt.Errorf("ingest anchor %q: %w", "m4", context.Canceled)
	b, jerr := json.Marshal(errorJSON(&ingestError{appended: 7, err: err}))
	if jerr != nil {
		t.Fatal(jerr)
	}
	var m map[string]map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["error"]["appended"] != float64(7) || !strings.Contains(m["error"]["message"].(string), "7 records appended") {
		t.Fatalf("error JSON %s: want appended 7, and the message to say so", b)
	}
}

// TestIngestFromANonDatabaseCreatesNothing: a --from that is no database is
// INPUT_001, and --dir is not created on the way.
func TestIngestFromANonDatabaseCreatesNothing(t *testing.T) {
	tmp := t.TempDir()
	dst := filepath.Join(tmp, "dst")
	r := runCLI(t, "--dir", dst, "--json", "ingest", "--from", tmp)
	wantExit(t, r, 2)
	errObj(t, r, "INPUT_001")
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatalf("the refused ingest created %s (%v)", dst, err)
	}
}

// TestFailedIngestIntoNewDirLeavesNothing: an ingest into a --dir that does
// not exist yet, refused before it joins anything (an --anchor the source
// lacks, a source another process holds, a damaged source), exits with its
// code and leaves no database behind — not even the directory, nor the
// parents it would have created: no empty database (DBID, LOCK, index,
// journal) is left at --dir.
func TestFailedIngestIntoNewDirLeavesNothing(t *testing.T) {
	tmp := t.TempDir()
	src := filepath.Join(tmp, "src")
	mustRun(t, "--dir", src, "put", "a", "k", "v")
	mustRun(t, "--dir", src, "put", "b", "k", "v")
	damaged := filepath.Join(tmp, "damaged")
	mustRun(t, "--dir", damaged, "put", "a", "k", "v")
	segs, err := filepath.Glob(filepath.Join(damaged, "anchors", "*", "*", "*"))
	if err != nil || len(segs) != 1 {
		t.Fatalf("segments of the damaged source: %v %v", segs, err)
	}
	b, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-3] ^= 0xff // inside the last frame's hash
	if err := os.WriteFile(segs[0], b, 0o644); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name string
		args []string
		code string
		exit int
	}{
		{"unknown anchor", []string{"--from", src, "--anchor", "does-not-exist"}, "STATE_003", 1},
		{"a known and an unknown anchor", []string{"--from", src, "--anchor", "a", "--anchor", "nope"}, "STATE_003", 1},
		{"damaged source", []string{"--from", damaged}, "INT_001", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			parent := filepath.Join(t.TempDir(), "new")
			dst := filepath.Join(parent, "dst")
			r := runCLI(t, append([]string{"--dir", dst, "--json", "ingest"}, c.args...)...)
			wantExit(t, r, c.exit)
			errObj(t, r, c.code)
			if _, err := os.Stat(parent); !os.IsNotExist(err) {
				ents, _ := os.ReadDir(dst)
				t.Fatalf("the refused ingest left %s behind (%v; in dst: %v)", parent, err, ents)
			}
		})
	}

	// A --dir that exists, empty, stays as it was: empty.
	dst := filepath.Join(tmp, "empty")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "--dir", dst, "--json", "ingest", "--from", src, "--anchor", "nope")
	wantExit(t, r, 1)
	errObj(t, r, "STATE_003")
	if ents, err := os.ReadDir(dst); err != nil || len(ents) != 0 {
		t.Fatalf("the refused ingest left files in the empty --dir: %v %v", ents, err)
	}

	// An existing database is never removed, though nothing was joined.
	mustRun(t, "--dir", dst, "put", "z", "k", "v")
	r = runCLI(t, "--dir", dst, "--json", "ingest", "--from", src, "--anchor", "nope")
	wantExit(t, r, 1)
	mustRun(t, "--dir", dst, "get", "k")

	// A successful ingest into a new directory keeps what it joined.
	dst = filepath.Join(tmp, "fresh")
	mustRun(t, "--dir", dst, "ingest", "--from", src)
	mustRun(t, "--dir", dst, "log", "b")
}

// TestIngestForkThenRepeat: the CLI's ingest end to end — a fork is
// STATE_002, exit 1, with both heads and nothing joined; a clean ingest
// joins, and an anchor named twice is joined once.
func TestIngestForkThenRepeat(t *testing.T) {
	tmp := t.TempDir()
	a, b := filepath.Join(tmp, "a"), filepath.Join(tmp, "b")
	mustRun(t, "--dir", a, "put", "x", "k", "from-a")
	mustRun(t, "--dir", a, "put", "y", "k", "from-a")
	mustRun(t, "--dir", b, "put", "x", "k", "from-b")
	r := runCLI(t, "--dir", b, "--json", "ingest", "--from", a)
	wantExit(t, r, 1)
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
