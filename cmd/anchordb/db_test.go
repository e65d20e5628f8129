package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/segment"
)

// TestLockHeld: while this process holds the database open, the CLI gets
// STATE_001 naming the holder's pid, exit 2, for writes and reads alike.
func TestLockHeld(t *testing.T) {
	dir := t.TempDir()
	db, err := engine.Open(dir, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"put", "a", "k", "v"}, {"get", "k"}, {"stats"}} {
		r := runCLI(t, append([]string{"--dir", dir, "--json"}, args...)...)
		wantExit(t, r, 2)
		e := errObj(t, r, "STATE_001")
		if e["reason"] != "scope_locked" || !strings.Contains(str(t, e, "message"), "pid "+strconv.Itoa(os.Getpid())) {
			t.Fatalf("%v: %v", args, e)
		}
	}
	r := runCLI(t, "--dir", dir, "put", "a", "k", "v")
	wantExit(t, r, 2)
	if !strings.Contains(r.stderr, "STATE_001 scope_locked") {
		t.Fatalf("human: %v", r)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	checkReceipt(t, mustRun(t, "--dir", dir, "--json", "put", "a", "k", "v").stdout, "a", 1)
}

// TestRecordsMatchEngine reads what the CLI wrote through the engine: hashes,
// genesis prev_hash, times and content agree with the JSON.
func TestRecordsMatchEngine(t *testing.T) {
	dir := t.TempDir()
	mustRun(t, "--dir", dir, "put", "dev-1", "color", "blue")
	mustRun(t, "--dir", dir, "put", "--idempotency-key", "op", "--no-sync", "dev-1", "color", "gr\u00fcn")
	out := lines(t, mustRun(t, "--dir", dir, "--json", "log", "dev-1").stdout)

	db, err := engine.Open(dir, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	i := 0
	for rec, err := range db.Log(context.Background(), "dev-1", 1, 0) {
		if err != nil {
			t.Fatal(err)
		}
		j := out[i]
		if j["hash"] != rec.Hash.String() || j["prev_hash"] != rec.PrevHash.String() || j["time"] != formatTime(rec.Time) ||
			j["value"] != string(rec.Value) || num(t, j, "counter") != int64(rec.Counter) {
			t.Fatalf("record %d: JSON %v, engine %+v", i, j, rec)
		}
		if rec.ComputeHash() != rec.Hash {
			t.Fatalf("record %d does not recompute", i)
		}
		i++
	}
	if out[0]["prev_hash"] != segment.GenesisHash("dev-1").String() {
		t.Fatalf("prev_hash of seq 1 is not the genesis hash")
	}
	if out[1]["idempotency_key"] != "op" || out[1]["value"] != "grün" {
		t.Fatalf("record 2: %v", out[1])
	}
}

func TestFormatTime(t *testing.T) {
	for ns, want := range map[int64]string{
		0:                   "1970-01-01T00:00:00.000000000Z",
		1:                   "1970-01-01T00:00:00.000000001Z",
		1769860800000000001: "2026-01-31T12:00:00.000000001Z",
		1769860800500000000: "2026-01-31T12:00:00.500000000Z",
	} {
		if got := formatTime(time.Unix(0, ns)); got != want {
			t.Errorf("formatTime(%d) = %s, want %s", ns, got, want)
		}
	}
}

func TestByteStringJSON(t *testing.T) {
	for in, want := range map[string]string{
		"plain":        `"plain"`,
		"":             `""`,
		"<&>":          `"<&>"`,
		"tab\there":    `"tab\there"`,
		"nul\x00":      `"nul\u0000"`,
		"\xff":         `{"b64":"/w=="}`,
		"ok\xc3":       `{"b64":"b2vD"}`,
		"ünïcode ☃":    `"ünïcode ☃"`,
		"\xed\xa0\x80": `{"b64":"7aCA"}`, // a surrogate is not valid UTF-8
	} {
		got, err := marshal(byteString(in))
		if err != nil || string(got) != want {
			t.Errorf("byteString(%q) = %s %v, want %s", in, got, err, want)
		}
	}
}

func TestDemo(t *testing.T) {
	r := mustRun(t, "--json", "demo", "--writers", "4", "--anchors", "6", "--records", "60")
	m := obj(t, r.stdout)
	if m["ok"] != true || num(t, m, "records") != 240 || num(t, m, "anchors") != 6 || m["kept"] != false {
		t.Fatalf("demo: %v", m)
	}
	if _, err := os.Stat(str(t, m, "dir")); !os.IsNotExist(err) {
		t.Fatalf("demo left its temporary directory %s", m["dir"])
	}
	checks := m["checks"].([]any)
	if len(checks) < 8 {
		t.Fatalf("checks: %v", checks)
	}
	// The sizes are real: the index as Close leaves it (it read 4.6 KiB, the
	// files of a running index whose rows were in memtables), and what the
	// compactions freed net of the stubs they wrote.
	if idx := num(t, m, "index_bytes"); idx < 60*240 {
		t.Errorf("index_bytes %d for 240 records: less than their record rows alone", idx)
	}
	removed, stubs, net := num(t, m, "removed_bytes"), num(t, m, "stub_bytes"), num(t, m, "net_bytes")
	if removed == 0 || stubs == 0 || net != removed-stubs {
		t.Errorf("removed %d, stubs %d, net %d: want net = removed - stubs, both nonzero", removed, stubs, net)
	}
	for _, c := range checks {
		if c.(map[string]any)["ok"] != true {
			t.Fatalf("check failed: %v", c)
		}
	}

	// Human report, in an explicit directory that is kept.
	dir := t.TempDir()
	r = mustRun(t, "demo", "--dir", dir, "--writers", "2", "--anchors", "3", "--records", "20")
	if !strings.Contains(r.stdout, "result    ok") || !strings.Contains(r.stdout, "records/s") {
		t.Fatalf("demo report: %v", r)
	}
	st := obj(t, mustRun(t, "--dir", dir, "--json", "stats").stdout)
	// 2 writers × 20 records, then the second round between compactions:
	// 2 writers × 20/4.
	if num(t, st, "records") != 2*20+2*5 {
		t.Fatalf("stats of the kept demo database: %v", st)
	}
	// The directory now holds a database: a second demo there is refused.
	r = runCLI(t, "--json", "demo", "--dir", dir, "--records", "1")
	wantExit(t, r, 2)
	errObj(t, r, "INPUT_001")

	r = mustRun(t, "--quiet", "demo", "--writers", "1", "--anchors", "1", "--records", "5")
	if strings.Count(r.stdout, "\n") != 1 || !strings.HasPrefix(r.stdout, "demo ok") {
		t.Fatalf("quiet demo: %q", r.stdout)
	}
}

// TestNoDatabaseNotCreated: a command that only reads, or that works on an
// existing database, refuses a --dir that does not exist or holds no
// database with INPUT_001 instead of creating one there; a refused import
// creates nothing either. Writing commands still create a fresh database.
func TestNoDatabaseNotCreated(t *testing.T) {
	tmp := t.TempDir()
	k := filepath.Join(tmp, "signer")
	mustRun(t, "keygen", "--out", k)
	policy := filepath.Join(tmp, "policy.json")
	if err := os.WriteFile(policy, []byte(`{"version":"v1","keep_snapshots":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := writeLines(t, "garbage", `{"anchor":"a","key":"k","value":"v"}`)
	cmds := [][]string{
		{"get", "k"}, {"history", "k"}, {"scan"}, {"log", "a"}, {"merge"}, {"verify"}, {"stats"},
		{"snapshot", "list"}, {"snapshot", "verify"}, {"snapshot", "create"},
		{"prove", "inclusion", "a", "1"}, {"prove", "consistency", "a", "1", "2"},
		{"checkpoint", "create", "--key", k + ".key"}, {"compact", "--policy", policy},
		{"rebuild-index"}, {"import", bad},
	}
	empty := filepath.Join(tmp, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range cmds {
		missing := filepath.Join(tmp, "missing")
		for _, dir := range []string{missing, empty} {
			r := runCLI(t, append([]string{"--dir", dir, "--json"}, args...)...)
			wantExit(t, r, 2)
			e := errObj(t, r, "INPUT_001")
			if args[0] != "import" && !strings.Contains(str(t, e, "message"), "no anchordb database at "+dir) {
				t.Fatalf("%v in %s: %v", args, dir, e)
			}
		}
		if _, err := os.Stat(missing); err == nil {
			t.Fatalf("%v created %s", args, missing)
		}
		if ents, _ := os.ReadDir(empty); len(ents) != 0 {
			t.Fatalf("%v wrote %v into an empty directory", args, ents)
		}
	}
	// Writers create one.
	good := writeLines(t, `{"anchor":"a","key":"k","value":"v"}`)
	for i, args := range [][]string{{"put", "a", "k", "v"}, {"del", "a", "k"}, {"import", good}} {
		dir := filepath.Join(tmp, fmt.Sprint("new", i))
		mustRun(t, append([]string{"--dir", dir}, args...)...)
		mustRun(t, "--dir", dir, "stats")
	}
	r := cli(t, []byte("x"), []string{"--dir", filepath.Join(tmp, "new-append"), "append", "a", "--type", "T"})
	wantExit(t, r, 0)
}

// TestJSONErrorOnFailedStdout: with --json an error is printed on stdout;
// when stdout itself fails (a full disk, not a reader that went away) the
// error must still be said, on stderr, rather than the command ending with
// exit 2 and no word: both when a stream fails midway and when only the
// error object is left to print.
func TestJSONErrorOnFailedStdout(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	defer full.Close()
	dir := filepath.Join(t.TempDir(), "db")
	// Enough records that the stream outgrows the 64 KiB output buffer.
	var b strings.Builder
	for i := range 300 {
		fmt.Fprintf(&b, `{"anchor":"a","key":"k%d","value":"%s"}`+"\n", i, strings.Repeat("v", 400))
	}
	r := cli(t, []byte(b.String()), []string{"--dir", dir, "import", "-"})
	wantExit(t, r, 0)

	run := func(args ...string) result {
		cmd := exec.Command(binary, args...)
		cmd.Stdout = full
		var errb bytes.Buffer
		cmd.Stderr = &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return result{stderr: errb.String(), code: code}
	}
	for _, args := range [][]string{
		{"--dir", dir, "--json", "log", "a"},          // the stream fails midway
		{"--dir", dir, "--json", "put", "", "k", "v"}, // only the error object
	} {
		r := run(args...)
		if r.code != 2 || !strings.Contains(r.stderr, "IO_001") && !strings.Contains(r.stderr, "INPUT_001") {
			t.Errorf("%v with stdout on /dev/full: want exit 2 and the error on stderr, got %v", args, r)
		}
	}
}
