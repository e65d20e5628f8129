package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"--dir", "x", "--help"}, {"help", "help"}} {
		r := runCLI(t, args...)
		wantExit(t, r, 0)
		if !strings.Contains(r.stdout, "usage: anchordb") || !strings.Contains(r.stdout, "put ANCHOR KEY VALUE") {
			t.Fatalf("%v: %v", args, r)
		}
	}
	for _, args := range [][]string{{"help", "put"}, {"put", "--help"}, {"put", "-h"}, {"import", "--help", "--json"}} {
		r := runCLI(t, args...)
		wantExit(t, r, 0)
		if !strings.Contains(r.stdout, "usage: anchordb "+args[len(args)-1]) && !strings.Contains(r.stdout, "usage: anchordb") {
			t.Fatalf("%v: %v", args, r)
		}
		if !strings.Contains(r.stdout, "--dir") {
			t.Fatalf("%v: no global flags in %v", args, r)
		}
	}
	r := runCLI(t, "help", "put")
	if !strings.Contains(r.stdout, "--idempotency-key") || !strings.Contains(r.stdout, "--counter") || !strings.Contains(r.stdout, "--no-sync") {
		t.Fatalf("put help: %v", r)
	}
	// Every command has help that names it.
	for _, c := range commands {
		r := runCLI(t, "help", c.name)
		wantExit(t, r, 0)
		if !strings.HasPrefix(r.stdout, "usage: anchordb "+c.name) {
			t.Fatalf("help %s: %v", c.name, r)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	r := runCLI(t, "frobnicate")
	wantExit(t, r, 2)
	if !strings.Contains(r.stderr, "usage: anchordb") || r.stdout != "" {
		t.Fatalf("unknown command: %v", r)
	}
	r = runCLI(t, "--dir", dir, "--json", "frobnicate")
	wantExit(t, r, 2)
	errObj(t, r, "INPUT_001")
	r = runCLI(t, "frobnicate", "--json")
	wantExit(t, r, 2)
	errObj(t, r, "INPUT_001")

	r = runCLI(t)
	wantExit(t, r, 2)
	if !strings.Contains(r.stderr, "usage: anchordb") {
		t.Fatalf("no command: %v", r)
	}
	r = runCLI(t, "help", "frobnicate")
	wantExit(t, r, 2)

	cases := [][]string{
		{"put", "a", "k"},                          // too few arguments
		{"put", "a", "k", "v", "extra"},            // too many
		{"put", "--counter", "abc", "a", "k", "v"}, // bad flag value
		{"put", "--counter", "-1", "a", "k", "v"},  // negative counter
		{"put", "--frob", "a", "k", "v"},           // unknown flag
		{"--counter", "3", "put", "a", "k", "v"},   // command flag before the command
		{"append", "a"},                            // --type missing
		{"scan", "--prefix", "a", "--start", "b"},  // prefix with range
		{"scan", "--limit", "-1"},                  // bad limit
		{"log"},                                    // anchor missing
		{"import"},                                 // file missing
		{"import", "--batch", "0", "-"},            // bad batch
		{"demo", "--writers", "0"},                 // bad demo size
		{"stats", "extra"},                         // stats takes no arguments
		{"get", "a", "b"},                          // one key only
		{"--dir", "", "stats"},                     // empty --dir
		{"put", "a", "k", "v", "--no-sync=maybe"},  // bad bool
		// Explicit values out of range are refused, not taken as "not given".
		{"put", "a", "k", "v", "--idempotency-key", ""},
		{"del", "a", "k", "--idempotency-key="},
		{"put", "a", "k", "v", "--counter", "0"},
		{"prove", "inclusion", "a", "1", "--size", "0"},
		{"prove", "consistency", "a", "1", "2", "--size", "0"},
	}
	for _, args := range cases {
		args = append([]string{"--dir", filepath.Join(dir, "db")}, args...)
		r := runCLI(t, args...)
		if r.code != 2 || !strings.Contains(r.stderr, "INPUT_001") {
			t.Errorf("%v: want exit 2 with INPUT_001 on stderr, got %v", args, r)
		}
		r = runCLI(t, append(args, "--json")...)
		if r.code != 2 {
			t.Errorf("%v --json: want exit 2, got %v", args, r)
			continue
		}
		errObj(t, r, "INPUT_001")
	}
	if _, err := os.Stat(filepath.Join(dir, "db")); err == nil {
		t.Errorf("a usage error created the database")
	}
}

// TestCoreFlow is the main path: put, get, del, history, log, with global
// flags before and after the command and ANCHORDB_DIR.
func TestCoreFlow(t *testing.T) {
	dir := t.TempDir()
	r1 := mustRun(t, "--dir", dir, "--json", "put", "dev-1", "color", "blue")
	rc1 := checkReceipt(t, r1.stdout, "dev-1", 1)
	if rc1["duplicate"] != false {
		t.Fatalf("duplicate in %v", rc1)
	}
	r2 := mustRun(t, "put", "dev-1", "color", "green", "--dir", dir, "--json")
	rc2 := checkReceipt(t, r2.stdout, "dev-1", 2)
	if num(t, rc2, "counter") <= num(t, rc1, "counter") {
		t.Fatalf("counters %v then %v", rc1, rc2)
	}
	// Flags mixed among the arguments, and the directory from the environment.
	r3 := cli(t, nil, []string{"put", "--json", "dev-2", "--no-sync", "size", "xl"}, "ANCHORDB_DIR="+dir)
	wantExit(t, r3, 0)
	checkReceipt(t, r3.stdout, "dev-2", 1)

	g := mustRun(t, "--dir", dir, "--json", "get", "color")
	gm := checkRecord(t, g.stdout)
	if gm["found"] != true || str(t, gm, "value") != "green" || num(t, gm, "seq") != 2 || str(t, gm, "anchor") != "dev-1" ||
		str(t, gm, "hash") != str(t, rc2, "hash") || gm["idempotency_key"] != nil {
		t.Fatalf("get: %v", gm)
	}
	if keys := keysInOrder(t, g.stdout); keys[len(keys)-1] != "found" {
		t.Fatalf("get keys %v", keys)
	}
	raw := mustRun(t, "--dir", dir, "get", "--raw", "color")
	if raw.stdout != "green" {
		t.Fatalf("get --raw: %q", raw.stdout)
	}

	miss := runCLI(t, "--dir", dir, "--json", "get", "nothing-here")
	wantExit(t, miss, 1)
	if m := obj(t, miss.stdout); m["found"] != false || m["key"] != "nothing-here" || len(m) != 2 {
		t.Fatalf("missing key: %v", miss)
	}
	miss = runCLI(t, "--dir", dir, "get", "nothing-here")
	wantExit(t, miss, 1)
	if miss.stdout != "" || !strings.Contains(miss.stderr, "not found") {
		t.Fatalf("missing key, human: %v", miss)
	}

	l := mustRun(t, "--dir", dir, "--json", "log", "dev-1")
	recs := lines(t, l.stdout)
	if len(recs) != 2 {
		t.Fatalf("log: %v", l)
	}
	for i, line := range strings.Split(strings.TrimSpace(l.stdout), "\n") {
		m := checkRecord(t, line)
		if num(t, m, "seq") != int64(i+1) || str(t, m, "type") != "put" || str(t, m, "key") != "color" {
			t.Fatalf("log line %d: %v", i, m)
		}
	}
	if recs[1]["prev_hash"] != recs[0]["hash"] {
		t.Fatalf("chain: %v", recs)
	}
	if str(t, recs[0], "hash") != str(t, rc1, "hash") {
		t.Fatalf("log hash differs from the receipt")
	}

	d := mustRun(t, "--dir", dir, "--json", "del", "dev-1", "color")
	checkReceipt(t, d.stdout, "dev-1", 3)
	miss = runCLI(t, "--dir", dir, "--json", "get", "color")
	wantExit(t, miss, 1)
	if obj(t, miss.stdout)["found"] != false {
		t.Fatalf("deleted key: %v", miss)
	}

	h := mustRun(t, "--dir", dir, "--json", "history", "color")
	hs := lines(t, h.stdout)
	var types []string
	for _, m := range hs {
		types = append(types, str(t, m, "type"))
	}
	if fmt.Sprint(types) != "[put put delete]" {
		t.Fatalf("history types %v", types)
	}
	if hs[2]["value"] != nil {
		t.Fatalf("a delete's value is %v, want null", hs[2]["value"])
	}
	if h := mustRun(t, "--dir", dir, "--json", "history", "never-written"); h.stdout != "" {
		t.Fatalf("history of an unknown key: %v", h)
	}

	// log --from/--to.
	l = mustRun(t, "--dir", dir, "--json", "log", "dev-1", "--from", "2", "--to", "2")
	if recs := lines(t, l.stdout); len(recs) != 1 || num(t, recs[0], "seq") != 2 {
		t.Fatalf("log --from 2 --to 2: %v", l)
	}
	l = mustRun(t, "--dir", dir, "--json", "log", "dev-1", "--from", "2")
	if recs := lines(t, l.stdout); len(recs) != 2 {
		t.Fatalf("log --from 2: %v", l)
	}
	l = runCLI(t, "--dir", dir, "--json", "log", "nobody")
	wantExit(t, l, 1)
	errObj(t, l, "STATE_003") // an unknown anchor: never an empty log
}

func TestHumanOutput(t *testing.T) {
	dir := t.TempDir()
	r := mustRun(t, "--dir", dir, "put", "dev-1", "color", "green")
	if !regexp.MustCompile(`^dev-1 #1 counter=\d+ blake3:[0-9a-f]{64}\n$`).MatchString(r.stdout) {
		t.Fatalf("human receipt: %q", r.stdout)
	}
	r = mustRun(t, "--dir", dir, "--quiet", "put", "dev-1", "color", "two words")
	if r.stdout != "" {
		t.Fatalf("--quiet put printed %q", r.stdout)
	}
	r = mustRun(t, "--dir", dir, "log", "dev-1")
	want := regexp.MustCompile(`^dev-1 #1 counter=\d+ \S+Z put color=green blake3:[0-9a-f]{64}\n` +
		`dev-1 #2 counter=\d+ \S+Z put color="two words" blake3:[0-9a-f]{64}\n$`)
	if !want.MatchString(r.stdout) {
		t.Fatalf("human log: %q", r.stdout)
	}
	r = mustRun(t, "--dir", dir, "get", "color")
	if !strings.Contains(r.stdout, `color="two words"`) {
		t.Fatalf("human get: %q", r.stdout)
	}
	r = mustRun(t, "--dir", dir, "stats")
	if !strings.Contains(r.stdout, "records:") || !strings.Contains(r.stdout, "durability:") {
		t.Fatalf("human stats: %q", r.stdout)
	}
	r = runCLI(t, "--dir", dir, "put", "--counter", "1", "dev-1", "k", "v")
	wantExit(t, r, 1)
	if r.stdout != "" || !strings.HasPrefix(r.stderr, "anchordb: STATE_002 conflict_detected: ") || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("human error: %v", r)
	}
}

func TestAppendBinaryAndEvents(t *testing.T) {
	dir := t.TempDir()
	payload := []byte("ev\xffbin\x00")
	r := cli(t, payload, []string{"--dir", dir, "--json", "append", "dev-2", "--type", "reading"})
	wantExit(t, r, 0)
	checkReceipt(t, r.stdout, "dev-2", 1)
	r = cli(t, []byte(`{"cpu":1}`), []string{"append", "dev-2", "--type", "TELEMETRY_UPDATE", "--key", "k1", "--dir", dir, "--json", "--idempotency-key", "op-7"})
	wantExit(t, r, 0)
	// A binary put through append, with a key that is not UTF-8.
	r = cli(t, []byte{0, 1, 2, 0xfe}, []string{"--dir", dir, "--json", "append", "dev-2", "--type", "put", "--key", "bin\xffkey"})
	wantExit(t, r, 0)

	l := mustRun(t, "--dir", dir, "--json", "log", "dev-2")
	recs := lines(t, l.stdout)
	if len(recs) != 3 {
		t.Fatalf("log: %v", l)
	}
	ev := recs[0]
	if ev["key"] != nil || ev["idempotency_key"] != nil || str(t, ev, "type") != "reading" {
		t.Fatalf("event: %v", ev)
	}
	if v, ok := ev["value"].(map[string]any); !ok || v["b64"] != "ZXb/YmluAA==" || len(v) != 1 {
		t.Fatalf("binary payload printed as %v", ev["value"])
	}
	if str(t, recs[1], "value") != `{"cpu":1}` || str(t, recs[1], "key") != "k1" || str(t, recs[1], "idempotency_key") != "op-7" {
		t.Fatalf("event with key: %v", recs[1])
	}
	if k, ok := recs[2]["key"].(map[string]any); !ok || k["b64"] != "Ymlu/2tleQ==" {
		t.Fatalf("binary key printed as %v", recs[2]["key"])
	}
	if v, ok := recs[2]["value"].(map[string]any); !ok || v["b64"] != "AAEC/g==" {
		t.Fatalf("binary value printed as %v", recs[2]["value"])
	}
	g := mustRun(t, "--dir", dir, "get", "--raw", "bin\xffkey")
	if g.stdout != "\x00\x01\x02\xfe" {
		t.Fatalf("get --raw of a binary value: %q", g.stdout)
	}
	// An empty payload is an empty string, not null.
	mustRun(t, "--dir", dir, "append", "dev-3", "--type", "PING")
	l = mustRun(t, "--dir", dir, "--json", "log", "dev-3")
	if v, ok := obj(t, l.stdout)["value"].(string); !ok || v != "" {
		t.Fatalf("empty payload: %v", l.stdout)
	}
	// A payload over the value limit is refused before anything is written.
	big := make([]byte, 16<<20+1)
	r = cli(t, big, []string{"--dir", dir, "--json", "append", "dev-3", "--type", "BIG"})
	wantExit(t, r, 2)
	errObj(t, r, "INPUT_001")
}

func TestBadAnchorIDs(t *testing.T) {
	dir := t.TempDir()
	bad := map[string]string{
		"empty":        "",
		"256 bytes":    strings.Repeat("a", 256),
		"invalid utf8": "dev\xff1",
		"control":      "dev\x01",
		"newline":      "dev\n1",
	}
	for name, id := range bad {
		for _, args := range [][]string{
			{"put", id, "k", "v"},
			{"del", id, "k"},
			{"log", id},
			{"append", id, "--type", "E"},
		} {
			r := runCLI(t, append([]string{"--dir", dir, "--json"}, args...)...)
			if r.code != 2 {
				t.Errorf("%s %s: want exit 2, got %v", name, args[0], r)
				continue
			}
			errObj(t, r, "INPUT_001")
		}
	}
	// The limits are inclusive: 255 bytes and odd but legal ids are fine.
	for _, id := range []string{strings.Repeat("é", 127) + "a", "../x", "a/b", "user@host", "Ünïcode"} {
		r := runCLI(t, "--dir", dir, "--json", "put", id, "k", "v")
		wantExit(t, r, 0)
		checkReceipt(t, r.stdout, id, 1)
		l := mustRun(t, "--dir", dir, "--json", "log", id)
		if m := obj(t, l.stdout); m["anchor"] != id {
			t.Fatalf("log of %q: %v", id, m)
		}
	}
}

func TestIdempotencyAndCounters(t *testing.T) {
	dir := t.TempDir()
	r1 := mustRun(t, "--dir", dir, "--json", "put", "--idempotency-key", "op-1", "q", "k", "v")
	r2 := mustRun(t, "--dir", dir, "--json", "put", "--idempotency-key", "op-1", "q", "k", "v")
	m1, m2 := obj(t, r1.stdout), obj(t, r2.stdout)
	if m2["duplicate"] != true || m1["seq"] != m2["seq"] || m1["hash"] != m2["hash"] || m1["counter"] != m2["counter"] {
		t.Fatalf("retry: %v then %v", m1, m2)
	}
	r3 := runCLI(t, "--dir", dir, "--json", "put", "--idempotency-key", "op-1", "q", "k", "other")
	wantExit(t, r3, 1)
	e := errObj(t, r3, "STATE_002")
	if e["reason"] != "conflict_detected" {
		t.Fatalf("reason %v", e)
	}
	orig, ok := e["original"].(map[string]any)
	if !ok || orig["seq"] != m1["seq"] || orig["hash"] != m1["hash"] || orig["anchor"] != "q" || orig["duplicate"] != false {
		t.Fatalf("conflict without the original receipt: %v", e)
	}
	fp := regexp.MustCompile(`^[0-9a-f]{16}$`)
	ex, rq := str(t, e, "existing_fingerprint"), str(t, e, "requested_fingerprint")
	if !fp.MatchString(ex) || !fp.MatchString(rq) || ex == rq {
		t.Fatalf("fingerprints %q %q", ex, rq)
	}
	// A delete with the same key is another request, too.
	wantExit(t, runCLI(t, "--dir", dir, "del", "--idempotency-key", "op-1", "q", "k"), 1)
	// The same idempotency key on another anchor is another scope.
	checkReceipt(t, mustRun(t, "--dir", dir, "--json", "put", "--idempotency-key", "op-1", "q2", "k", "other").stdout, "q2", 1)

	// Counters: a supplied counter must increase; the clock then follows it.
	c := mustRun(t, "--dir", dir, "--json", "put", "--counter", "100", "c", "k", "v")
	if num(t, obj(t, c.stdout), "counter") != 100 {
		t.Fatalf("--counter 100: %v", c)
	}
	for _, counter := range []string{"100", "50"} {
		r := runCLI(t, "--dir", dir, "--json", "put", "--counter", counter, "c", "k", "v")
		wantExit(t, r, 1)
		errObj(t, r, "STATE_002")
	}
	c = mustRun(t, "--dir", dir, "--json", "put", "c", "k", "v2")
	if num(t, obj(t, c.stdout), "counter") != 101 {
		t.Fatalf("the clock after counter 100: %v", c)
	}
	r := runCLI(t, "--dir", dir, "--json", "put", "--counter", "9223372036854775808", "c", "k", "v")
	wantExit(t, r, 2)
	errObj(t, r, "INPUT_001")
	// The caller limit leaves the clock room (engine.MaxCallerCounter).
	r = runCLI(t, "--dir", dir, "--json", "put", "--counter", "4611686018427387904", "c", "k", "v")
	wantExit(t, r, 2)
	if e := errObj(t, r, "INPUT_001"); !strings.Contains(str(t, e, "message"), "4611686018427387903") {
		t.Errorf("the refusal does not name the limit: %v", e)
	}
	// With an idempotency key it could be a retry of an older append; as a
	// new one it is refused all the same.
	r = runCLI(t, "--dir", dir, "--json", "put", "--counter", "4611686018427387904", "--idempotency-key", "op-big", "c", "k", "v")
	wantExit(t, r, 2)
	errObj(t, r, "INPUT_001")
	mustRun(t, "--dir", dir, "--json", "put", "--counter", "4611686018427387903", "c", "k", "v")
	c = mustRun(t, "--dir", dir, "--json", "put", "d", "k", "v")
	if num(t, obj(t, c.stdout), "counter") != 4611686018427387904 {
		t.Fatalf("the clock after the largest caller counter: %v", c)
	}
}

func TestScan(t *testing.T) {
	dir := t.TempDir()
	for _, kv := range [][2]string{{"b", "2"}, {"a", "1"}, {"ab", "x"}, {"c", "3"}, {"a", "1b"}} {
		mustRun(t, "--dir", dir, "put", "dev", kv[0], kv[1])
	}
	mustRun(t, "--dir", dir, "del", "dev", "c")
	keys := func(args ...string) string {
		t.Helper()
		r := mustRun(t, append([]string{"--dir", dir, "--json", "scan"}, args...)...)
		var ks []string
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			if line == "" {
				continue
			}
			m := checkRecord(t, line)
			ks = append(ks, str(t, m, "key")+"="+str(t, m, "value"))
		}
		return strings.Join(ks, " ")
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "a=1b ab=x b=2"},
		{[]string{"--prefix", ""}, "a=1b ab=x b=2"},
		{[]string{"--prefix", "a"}, "a=1b ab=x"},
		{[]string{"--start", "ab"}, "ab=x b=2"},
		{[]string{"--start", "a", "--end", "b"}, "a=1b ab=x"},
		{[]string{"--end", "ab"}, "a=1b"},
		{[]string{"--limit", "2"}, "a=1b ab=x"},
		{[]string{"--prefix", "zz"}, ""},
	} {
		if got := keys(c.args...); got != c.want {
			t.Errorf("scan %v: %q, want %q", c.args, got, c.want)
		}
	}
}

func TestStats(t *testing.T) {
	dir := t.TempDir()
	mustRun(t, "--dir", dir, "put", "a", "k", "v")
	mustRun(t, "--dir", dir, "put", "b", "k", "v")
	r := mustRun(t, "--dir", dir, "--json", "stats")
	m := obj(t, r.stdout)
	if num(t, m, "anchors") != 2 || num(t, m, "records") != 2 || str(t, m, "durability") != "sync" || num(t, m, "segment_files") != 2 {
		t.Fatalf("stats: %v", m)
	}
	rec, ok := m["recovery"].(map[string]any)
	if !ok || rec["clean"] != true || rec["events"] == nil {
		t.Fatalf("stats recovery: %v", m)
	}
}

func TestFlagsAnywhere(t *testing.T) {
	dir := t.TempDir()
	for i, args := range [][]string{
		{"--dir", dir, "--json", "put", "a", "k", "v"},
		{"put", "a", "k", "v", "--dir", dir, "--json"},
		{"put", "--dir=" + dir, "a", "--json=true", "k", "v"},
		{"--json", "put", "a", "--dir", dir, "k", "v", "--no-progress", "--quiet"},
		// "--" before the command ends only the global flags.
		{"--dir", dir, "--", "put", "a", "k", "v", "--json"},
	} {
		r := runCLI(t, args...)
		wantExit(t, r, 0)
		checkReceipt(t, r.stdout, "a", int64(i+1))
	}
	// "--" lets a key start with a dash.
	r := mustRun(t, "--dir", dir, "--json", "put", "a", "--", "-k", "-v")
	if m := obj(t, r.stdout); m["anchor"] != "a" {
		t.Fatalf("put with --: %v", m)
	}
	g := mustRun(t, "--dir", dir, "--json", "get", "--", "-k")
	if str(t, obj(t, g.stdout), "value") != "-v" {
		t.Fatalf("get -k: %v", g)
	}
}

// TestDirValueDashDash: "--" given as the value of --dir is the directory,
// not the end of the global flags; read the other way, `--dir -- put x a k`
// would write anchor "a" into ./x.
func TestDirValueDashDash(t *testing.T) {
	wd := t.TempDir()
	cmd := exec.Command(binary, "--json", "--dir", "--", "put", "x", "a", "k")
	cmd.Dir = wd
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	_ = cmd.Run()
	if _, err := os.Stat(filepath.Join(wd, "x")); err == nil {
		t.Fatalf("`--dir -- put x a k` created a database in ./x (the first positional argument taken as --dir): %s", out.String())
	}
	if !strings.Contains(out.String(), `"anchor":"x"`) {
		t.Fatalf("want a receipt for anchor x in ./--; got stdout %s stderr %s", out.String(), errb.String())
	}
}

// TestErrorMessageHasNoCode: the code and reason are printed once, in their
// own fields (or at the start of the human line), never again inside the
// message, however deep the coded error that caused it.
func TestErrorMessageHasNoCode(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "db")
	mustRun(t, "--dir", db, "put", "a1", "k", "v")
	p := obj(t, mustRun(t, "--dir", db, "--json", "prove", "inclusion", "a1", "1").stdout)
	p["leaf"] = "blake3:zz"
	b, _ := json.Marshal(p)
	proofFile := filepath.Join(dir, "bad-leaf.json")
	frontierFile := filepath.Join(dir, "frontier.json")
	if err := os.WriteFile(proofFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(frontierFile, []byte(`{"":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	codeRE := regexp.MustCompile(`[A-Z]+_[0-9]{3} [a-z_]+`)
	for _, args := range [][]string{{"verify-proof", proofFile}, {"--dir", db, "merge", "--frontier", frontierFile}} {
		r := runCLI(t, append([]string{"--json"}, args...)...)
		wantExit(t, r, 2)
		if msg := str(t, errObj(t, r, "INPUT_001"), "message"); codeRE.MatchString(msg) {
			t.Errorf("%v: the message repeats a code: %q", args, msg)
		}
		r = runCLI(t, args...)
		wantExit(t, r, 2)
		if n := len(codeRE.FindAllString(r.stderr, -1)); n != 1 {
			t.Errorf("%v: %d codes in the human line: %q", args, n, r.stderr)
		}
	}
}

// TestJSONRequestedSpellings: a flag error before --json was parsed is still
// reported as JSON for every spelling of true pflag accepts, and as text for
// every spelling of false.
func TestJSONRequestedSpellings(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	for _, v := range []string{"t", "T", "TRUE", "True", "true", "1"} {
		for _, args := range [][]string{{"get", "k", "--json=" + v, "--bogus"}, {"--json=" + v, "--bogus", "get", "k"}} {
			r := runCLI(t, append([]string{"--dir", dir}, args...)...)
			wantExit(t, r, 2)
			errObj(t, r, "INPUT_001")
		}
	}
	for _, v := range []string{"f", "F", "FALSE", "0", "false"} {
		r := runCLI(t, "--dir", dir, "get", "k", "--json", "--json="+v, "--bogus")
		wantExit(t, r, 2)
		if r.stdout != "" || !strings.Contains(r.stderr, "INPUT_001") {
			t.Fatalf("--json=%s: %v", v, r)
		}
	}
}

// TestAppendRefusesBeforeReadingStdin: a put without --key is refused at
// once, not after stdin ends (reading a slow pipe to its end first). The
// pipe here never ends; the refusal must come anyway.
func TestAppendRefusesBeforeReadingStdin(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	cmd := exec.Command(binary, "--dir", t.TempDir(), "--json", "append", "a", "--type", "put")
	cmd.Stdin = pr
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pr.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("append --type put without --key waited for stdin to end")
	}
	if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(out.String(), "INPUT_001") {
		t.Fatalf("exit %d, %s: want INPUT_001, exit 2", code, out.String())
	}
}

// TestEmptyFileFlagsRefused: a file flag given with an empty value (as a
// script passing an unset variable does) is refused, not read as absent:
// verify --pub "" would skip the signature checks it was asked for and
// still say ok, and get --at "" would answer from the current state
// instead of the frontier asked for.
func TestEmptyFileFlagsRefused(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "db")
	mustRun(t, "--dir", dir, "put", "a", "k", "v")
	k := filepath.Join(tmp, "k")
	mustRun(t, "keygen", "--out", k)
	mustRun(t, "--dir", dir, "checkpoint", "create", "--key", k+".key")
	for _, args := range [][]string{
		{"verify", "--pub", ""},
		{"verify", "--pub="},
		{"verify", "--from-checkpoint", "", "--pub", k + ".pub"},
		{"get", "k", "--at", ""},
		{"merge", "--frontier", ""},
		{"merge", "--root", "--frontier="},
		{"snapshot", "create", "--policy", ""},
	} {
		args = append([]string{"--dir", dir, "--json"}, args...)
		r := runCLI(t, args...)
		if r.code != 2 {
			t.Errorf("%v: want exit 2, got %v", args, r)
			continue
		}
		errObj(t, r, "INPUT_001")
	}
	if n := len(lines(t, mustRun(t, "--dir", dir, "--json", "snapshot", "list").stdout)); n != 0 {
		t.Errorf("%d snapshots after the refused snapshot create, want 0", n)
	}
}
