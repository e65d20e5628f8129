package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// The tests build the binary once and run it as a subprocess, so they see
// exactly what a user sees: stdout, stderr and the exit status.

var binary string

func TestMain(m *testing.M) {
	if os.Getenv(signalHelperEnv) != "" {
		signalHelper(os.Getenv(signalHelperEnv)) // a child of TestSecondSignalExitsAtOnce
		return
	}
	if dir := os.Getenv(writerHelperEnv); dir != "" {
		writerHelper(dir) // a child of TestVerifyLogProveBesideAWriterProcess
		return
	}
	dir, err := os.MkdirTemp("", "anchordb-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	binary = filepath.Join(dir, "anchordb")
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	build := exec.Command(goTool, "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build anchordb:", err)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
}

// cli runs the binary with stdin (nil: empty) and args, with ANCHORDB_DIR
// unset unless env sets it.
func cli(t *testing.T, stdin []byte, args []string, env ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ANCHORDB_DIR=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// runCLI is cli with no stdin.
func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	return cli(t, nil, args)
}

// mustRun runs and requires exit 0.
func mustRun(t *testing.T, args ...string) result {
	t.Helper()
	r := cli(t, nil, args)
	if r.code != 0 {
		t.Fatalf("%v: %v", args, r)
	}
	return r
}

// wantExit requires the run to have exited with code (README: 0 ok, 1 an
// integrity or conflict finding, 2 usage, I/O or bad input).
func wantExit(t *testing.T, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d, got %v", code, r)
	}
}

// obj decodes one JSON object.
func obj(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, s)
	}
	var extra any
	if err := dec.Decode(&extra); err != io.EOF {
		t.Fatalf("more than one JSON value in %q", s)
	}
	return m
}

// lines decodes one JSON object per line.
func lines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		if l == "" {
			continue
		}
		out = append(out, obj(t, l))
	}
	return out
}

// keysInOrder returns the top-level keys of a JSON object in their order.
func keysInOrder(t *testing.T, s string) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", s)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

func str(t *testing.T, m map[string]any, k string) string {
	t.Helper()
	s, ok := m[k].(string)
	if !ok {
		t.Fatalf("%q is %T %v, want a string (in %v)", k, m[k], m[k], m)
	}
	return s
}

func num(t *testing.T, m map[string]any, k string) int64 {
	t.Helper()
	n, ok := m[k].(json.Number)
	if !ok {
		t.Fatalf("%q is %T %v, want a number (in %v)", k, m[k], m[k], m)
	}
	i, err := n.Int64()
	if err != nil {
		t.Fatalf("%q: %v", k, err)
	}
	return i
}

// errObj checks the error shape and returns its body.
func errObj(t *testing.T, r result, code string) map[string]any {
	t.Helper()
	m := obj(t, r.stdout)
	e, ok := m["error"].(map[string]any)
	if !ok {
		t.Fatalf("no error object: %v", r)
	}
	if got := str(t, e, "code"); got != code {
		t.Fatalf("error code %s, want %s: %v", got, code, r)
	}
	if str(t, e, "reason") == "" || str(t, e, "message") == "" {
		t.Fatalf("error without reason or message: %v", r)
	}
	return e
}

var (
	hashRE = regexp.MustCompile(`^blake3:[0-9a-f]{64}$`)
	timeRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$`)
)

var receiptKeys = []string{"anchor", "seq", "counter", "hash", "duplicate"}

var recordKeys = []string{"anchor", "seq", "counter", "time", "type", "key", "value", "idempotency_key", "prev_hash", "hash"}

func checkReceipt(t *testing.T, s, anchor string, seq int64) map[string]any {
	t.Helper()
	if got := keysInOrder(t, s); fmt.Sprint(got) != fmt.Sprint(receiptKeys) {
		t.Fatalf("receipt keys %v, want %v", got, receiptKeys)
	}
	m := obj(t, s)
	if str(t, m, "anchor") != anchor || num(t, m, "seq") != seq || !hashRE.MatchString(str(t, m, "hash")) || num(t, m, "counter") < 1 {
		t.Fatalf("receipt %v, want anchor %s seq %d", m, anchor, seq)
	}
	return m
}

func checkRecord(t *testing.T, s string) map[string]any {
	t.Helper()
	if got := keysInOrder(t, s); fmt.Sprint(got[:len(recordKeys)]) != fmt.Sprint(recordKeys) {
		t.Fatalf("record keys %v, want %v", got, recordKeys)
	}
	m := obj(t, s)
	if !timeRE.MatchString(str(t, m, "time")) || !hashRE.MatchString(str(t, m, "hash")) || !hashRE.MatchString(str(t, m, "prev_hash")) {
		t.Fatalf("record %v", m)
	}
	return m
}
