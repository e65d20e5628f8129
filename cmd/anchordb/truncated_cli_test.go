package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// truncatedCLI makes, with the CLI alone, a database whose anchor a (300
// records over seven keys, in segments of 1 KiB) a truncating compaction
// has cut, and returns its --dir flag and what `merge --root` said, at the
// current frontier and at {"a":20} (inside the cut), before the cut.
func truncatedCLI(t *testing.T) (dirFlag string, root, rootAt20 map[string]any, frontier20 string) {
	t.Helper()
	tmp := t.TempDir()
	dirFlag = "--dir=" + filepath.Join(tmp, "db")
	var lines strings.Builder
	for i := 0; i < 300; i++ {
		fmt.Fprintf(&lines, `{"anchor":"a","key":"k%d","value":"%d"}`+"\n", i%7, i)
	}
	events := filepath.Join(tmp, "events.jsonl")
	policy := filepath.Join(tmp, "policy.json")
	frontier20 = filepath.Join(tmp, "f20.json")
	for name, body := range map[string]string{events: lines.String(),
		policy:     `{"keep_snapshots":1,"raw_log":"truncate","snapshot":{"every_records":1}}`,
		frontier20: `{"a":20}`} {
		if err := os.WriteFile(name, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mustRun(t, "import", events, "--segment-size", "1024", dirFlag)
	mustRun(t, "keygen", "--out", filepath.Join(tmp, "k"))
	mustRun(t, "compact", "--policy", policy, "--apply", dirFlag) // the snapshot to cut below
	mustRun(t, "put", "a", "last", "x", "--segment-size", "1024", dirFlag)
	root = obj(t, mustRun(t, "merge", "--root", "--json", dirFlag).stdout)
	rootAt20 = obj(t, mustRun(t, "merge", "--root", "--json", "--frontier", frontier20, dirFlag).stdout)
	mustRun(t, "checkpoint", "create", "--key", filepath.Join(tmp, "k.key"), dirFlag)
	if r := mustRun(t, "compact", "--policy", policy, "--apply", dirFlag); !strings.Contains(r.stdout, "remove_segment") {
		t.Fatalf("the second compaction removed nothing:\n%s", r.stdout)
	}
	return dirFlag, root, rootAt20, frontier20
}

// After a truncating compaction `log` prints the records the stubs keep
// and refuses the rest with STATE_003 naming the first seq still held
// (it printed nothing and exited 0); `log` of an unknown anchor is
// STATE_003 (it printed nothing and exited 0); and `merge --root` gives the
// root it gave before the compaction, at the current frontier and at one
// inside the cut (there it gave the empty root, exit 0, while `get --at`
// refused).
func TestTruncatedLogAndMergeAnswerTrueOrRefuse(t *testing.T) {
	dir, root, rootAt20, f20 := truncatedCLI(t)

	r := runCLI(t, "log", "a", "--from", "1", "--to", "30", "--json", dir)
	wantExit(t, r, 1)
	out := lines(t, r.stdout)
	if len(out) < 2 {
		t.Fatalf("log a 1..30 below the cut: %v", r)
	}
	e, ok := out[len(out)-1]["error"].(map[string]any)
	if !ok || str(t, e, "code") != "STATE_003" || !strings.Contains(str(t, e, "message"), "held whole from seq") {
		t.Fatalf("log a 1..30 does not end in a STATE_003 naming the seq held whole from: %v", r)
	}
	prev := int64(0)
	for _, rec := range out[:len(out)-1] {
		if s := num(t, rec, "seq"); s <= prev || s > 30 || str(t, rec, "anchor") != "a" {
			t.Fatalf("log a 1..30 printed %v", rec)
		} else {
			prev = s
		}
	}
	r = runCLI(t, "log", "a", "--from", "1", "--to", "30", dir)
	wantExit(t, r, 1)
	if !strings.Contains(r.stderr, "STATE_003") || strings.Count(r.stdout, "\n") != len(out)-1 {
		t.Fatalf("log a 1..30 as text: %v", r)
	}

	r = runCLI(t, "log", "nosuch", "--json", dir)
	wantExit(t, r, 1)
	errObj(t, r, "STATE_003")

	if got := obj(t, mustRun(t, "merge", "--root", "--json", dir).stdout); got["root"] != root["root"] || got["records"].(fmt.Stringer).String() != root["records"].(fmt.Stringer).String() {
		t.Fatalf("merge --root after the compaction: %v; before it: %v", got, root)
	}
	r = runCLI(t, "merge", "--root", "--json", "--frontier", f20, dir)
	wantExit(t, r, 0)
	if got := obj(t, r.stdout); got["root"] != rootAt20["root"] || num(t, got, "records") != 20 {
		t.Fatalf("merge --root --frontier {\"a\":20} inside the cut: %v; before the compaction: %v", got, rootAt20)
	}
	// The state at that frontier is not known: get --at refuses, as before.
	r = runCLI(t, "get", "k1", "--at", f20, "--json", dir)
	wantExit(t, r, 1)
	errObj(t, r, "STATE_003")
	// The merged stream: what is held, then STATE_003 for what is gone.
	r = runCLI(t, "merge", "--json", dir)
	wantExit(t, r, 1)
	out = lines(t, r.stdout)
	if e, ok := out[len(out)-1]["error"].(map[string]any); !ok || str(t, e, "code") != "STATE_003" {
		t.Fatalf("merge after a truncation does not end in STATE_003: %v", r)
	}
}
