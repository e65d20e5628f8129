package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/engine"
)

// mergeFixture writes three anchors whose merged order is c, a, b: counters
// 1, 2, 2, the tie broken by the anchor id bytes.
func mergeFixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	mustRun(t, "--dir", dir, "put", "--counter", "2", "b", "x", "1")
	mustRun(t, "--dir", dir, "put", "--counter", "2", "a", "x", "2")
	mustRun(t, "--dir", dir, "put", "--counter", "1", "c", "x", "3")
	mustRun(t, "--dir", dir, "put", "c", "y", "4") // counter 3
	return dir
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMergeCommand(t *testing.T) {
	dir := mergeFixture(t)
	r := mustRun(t, "--dir", dir, "--json", "merge")
	var got []string
	for i, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		m := checkRecord(t, line)
		if keys := keysInOrder(t, line); keys[len(keys)-1] != "pos" {
			t.Fatalf("merge keys %v: pos should follow the record shape", keys)
		}
		if num(t, m, "pos") != int64(i+1) {
			t.Fatalf("line %d: %v", i, m)
		}
		got = append(got, fmt.Sprintf("%d:%s#%d", num(t, m, "pos"), str(t, m, "anchor"), num(t, m, "seq")))
	}
	if strings.Join(got, " ") != "1:c#1 2:a#1 3:b#1 4:c#2" {
		t.Fatalf("merged order %v", got)
	}

	// --from and --limit keep the global positions.
	r = mustRun(t, "--dir", dir, "--json", "merge", "--from", "2", "--limit", "2")
	ls := lines(t, r.stdout)
	if len(ls) != 2 || num(t, ls[0], "pos") != 2 || str(t, ls[0], "anchor") != "a" || num(t, ls[1], "pos") != 3 {
		t.Fatalf("merge --from 2 --limit 2: %v", r)
	}
	if r := mustRun(t, "--dir", dir, "--json", "merge", "--from", "9"); r.stdout != "" {
		t.Fatalf("merge past the end: %v", r)
	}
	h := mustRun(t, "--dir", dir, "merge", "--limit", "1")
	if !strings.HasPrefix(h.stdout, "pos=1 c #1 counter=1 ") || strings.Count(h.stdout, "\n") != 1 {
		t.Fatalf("human merge: %q", h.stdout)
	}

	// --root: the root, the count and the frontier it was taken at.
	r = mustRun(t, "--dir", dir, "--json", "merge", "--root")
	if keys := keysInOrder(t, r.stdout); strings.Join(keys, ",") != "root,records,frontier" {
		t.Fatalf("root keys %v", keys)
	}
	root := obj(t, r.stdout)
	f, ok := root["frontier"].(map[string]any)
	if !hashRE.MatchString(str(t, root, "root")) || num(t, root, "records") != 4 || !ok || len(f) != 3 || fmt.Sprint(f["c"]) != "2" {
		t.Fatalf("merge --root: %v", root)
	}
	// The printed frontier feeds back into --frontier and gives the same root.
	ff := writeFile(t, "f.json", fmt.Sprintf(`{"a":%v,"b":%v,"c":%v}`, f["a"], f["b"], f["c"]))
	again := obj(t, mustRun(t, "--dir", dir, "--json", "merge", "--root", "--frontier", ff).stdout)
	if again["root"] != root["root"] {
		t.Fatalf("root at the printed frontier %v, want %v", again, root)
	}
	if h := mustRun(t, "--dir", dir, "merge", "--root"); !strings.HasPrefix(h.stdout, "merged root blake3:") {
		t.Fatalf("human root: %q", h.stdout)
	}

	// A frontier selects prefixes; get --at answers from that state.
	f1 := writeFile(t, "f1.json", `{"c":1,"a":1}`)
	ls = lines(t, mustRun(t, "--dir", dir, "--json", "merge", "--frontier", f1).stdout)
	if len(ls) != 2 || str(t, ls[1], "anchor") != "a" {
		t.Fatalf("merge --frontier: %v", ls)
	}
	if g := obj(t, mustRun(t, "--dir", dir, "--json", "get", "x").stdout); g["value"] != "1" {
		t.Fatalf("get x: %v", g)
	}
	g := mustRun(t, "--dir", dir, "--json", "get", "x", "--at", f1)
	if m := checkRecord(t, g.stdout); m["value"] != "2" || m["found"] != true || str(t, m, "anchor") != "a" {
		t.Fatalf("get x --at: %v", m)
	}
	miss := runCLI(t, "--dir", dir, "--json", "get", "y", "--at", f1) // y came later
	wantExit(t, miss, 1)
	if m := obj(t, miss.stdout); m["found"] != false {
		t.Fatalf("get y --at: %v", miss)
	}
	g = cli(t, []byte(`{"c":2}`), []string{"--dir", dir, "--json", "get", "y", "--at", "-"})
	wantExit(t, g, 0)
	if m := obj(t, g.stdout); m["value"] != "4" {
		t.Fatalf("get --at - : %v", g)
	}

	// Errors: an unknown anchor or a seq beyond the head is STATE_003; a
	// malformed frontier INPUT_001.
	for _, fr := range []string{`{"zz":1}`, `{"a":5}`} {
		p := writeFile(t, "bad.json", fr)
		for _, args := range [][]string{{"merge", "--frontier", p}, {"merge", "--root", "--frontier", p}, {"get", "x", "--at", p}} {
			r := runCLI(t, append([]string{"--dir", dir, "--json"}, args...)...)
			wantExit(t, r, 1)
			errObj(t, r, "STATE_003")
		}
	}
	for _, fr := range []string{`{"a":`, `[1]`, `{"a":-1}`, `{"a":1.5}`, `{"a":1,"a":2}`, `{"":1}`} {
		p := writeFile(t, "bad.json", fr)
		r := runCLI(t, "--dir", dir, "--json", "merge", "--frontier", p)
		wantExit(t, r, 2)
		errObj(t, r, "INPUT_001")
	}
	for _, args := range [][]string{
		{"merge", "--root", "--limit", "1"},
		{"merge", "--root", "--from", "2"},
		{"merge", "--limit", "-1"},
		{"merge", "extra"},
		{"merge", "--frontier", filepath.Join(dir, "missing.json")},
	} {
		r := runCLI(t, append([]string{"--dir", dir, "--json"}, args...)...)
		wantExit(t, r, 2)
		errObj(t, r, "INPUT_001")
	}
	// An empty database merges to nothing, with the empty root. (An empty
	// directory is no database: merge refuses it rather than create one.)
	empty := t.TempDir()
	db, err := engine.Open(empty, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if r := mustRun(t, "--dir", empty, "--json", "merge"); r.stdout != "" {
		t.Fatalf("merge of an empty database: %v", r)
	}
	if m := obj(t, mustRun(t, "--dir", empty, "--json", "merge", "--root").stdout); num(t, m, "records") != 0 {
		t.Fatalf("root of an empty database: %v", m)
	}
}

// TestBenchCommand: `anchordb bench` runs the harness on its systems and
// prints the results as JSON, writing the files --out names.
func TestBenchCommand(t *testing.T) {
	out := t.TempDir()
	r := mustRun(t, "--json", "bench", "--count", "60", "--writers", "3", "--batch", "20", "--read-passes", "2",
		"--workload", "sync-append,get,merge", "--tmp", t.TempDir(), "--out", out)
	m := obj(t, r.stdout)
	rs, ok := m["results"].([]any)
	if !ok || len(rs) != 12 { // 3 workloads × 4 systems
		t.Fatalf("bench results: %v", m)
	}
	// merge runs on anchordb and on its floor, over every record loaded;
	// get reads every key once per pass.
	for _, x := range rs {
		res := x.(map[string]any)
		if res["workload"] == "get" && (res["system"] == "anchordb" || res["system"] == "pebble") {
			if res["skipped"] != nil || fmt.Sprint(res["records"]) != "120" {
				t.Fatalf("get on %v with 2 read passes: %v", res["system"], res)
			}
		}
		if res["workload"] != "merge" || (res["system"] != "anchordb" && res["system"] != "floor") {
			continue
		}
		if res["skipped"] != nil || fmt.Sprint(res["records"]) != "60" {
			t.Fatalf("merge on %v: %v", res["system"], res)
		}
	}
	for _, name := range []string{"results.json", "results.txt", "sync-append.svg", "get.svg", "merge.svg"} {
		if _, err := os.Stat(filepath.Join(out, name)); err != nil {
			t.Fatalf("--out: %v", err)
		}
	}
	bad := runCLI(t, "bench", "--systems", "nosuch")
	wantExit(t, bad, 2)
	// Sizes beyond the harness's limits are refused up front, naming the
	// limit (a huge --value-size used to die of "out of memory").
	for _, args := range [][]string{{"--value-size", "99999999999", "--count", "1"}, {"--count", "100000000000"},
		{"--writers", "1000000"}, {"--batch", "0"}, {"--read-passes", "1000000"}} {
		bad = runCLI(t, append([]string{"--json", "bench", "--tmp", t.TempDir()}, args...)...)
		wantExit(t, bad, 2)
		if e := errObj(t, bad, "INPUT_001"); !strings.Contains(str(t, e, "message"), "limit") || strings.Contains(str(t, e, "message"), "INPUT_001") {
			t.Fatalf("%v: %v", args, bad)
		}
	}
}
