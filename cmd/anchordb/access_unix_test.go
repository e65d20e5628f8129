//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/snapshot"
)

// Reading and verifying without the write lock: beside a writer process,
// and on a copy this user cannot write.

const writerHelperEnv = "ANCHORDB_WRITER_HELPER"

// writerAnchors are the anchors writerHelper appends to.
var writerAnchors = []string{"w1", "w2", "w/3", "w4"}

// writerHelper opens the database at dir for writing, with small segments
// (sealed every few dozen records) and frequent settles (journal files
// deleted under readers), and appends to writerAnchors from one goroutine
// each, durably and not, with a checkpoint and a truncating compaction
// every 50 ms (stubs replace segments under readers). It prints "ready"
// once every anchor has records and runs until its stdin ends, then
// prints the number of records it appended and exits.
func writerHelper(dir string) {
	ctx, cancel := context.WithCancel(context.Background())
	fail := func(err error) {
		fmt.Println("error:", err)
		os.Exit(3)
	}
	db, err := engine.Open(dir, engine.Options{SegmentSize: 4096, SettleBytes: 128 << 10, InlineValueMax: 16})
	if err != nil {
		fail(err)
	}
	skey, _, err := proof.GenerateKeys("writer.test/anchordb")
	if err != nil {
		fail(err)
	}
	var n sync.WaitGroup
	var count sync.Map
	var firsts sync.WaitGroup
	firsts.Add(len(writerAnchors))
	for w, a := range writerAnchors {
		n.Add(1)
		go func() {
			defer n.Done()
			for i := 0; ctx.Err() == nil; i++ {
				_, err := db.Put(ctx, a, []byte(fmt.Sprintf("k%d", i%30)), bytes.Repeat([]byte{'v'}, 8+(i*7)%60), engine.WithNoSync(i%2 == 0))
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					fail(err)
				}
				if i == 0 {
					firsts.Done()
				}
				count.Store(w, i+1)
			}
		}()
	}
	n.Add(1)
	go func() {
		defer n.Done()
		policy := snapshot.Policy{Version: "v1", Snapshot: snapshot.Triggers{EveryRecords: 1}, KeepSnapshots: 1, RawLog: "truncate", VerifyBeforeDelete: true}
		for ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
			if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
				if ctx.Err() != nil {
					return
				}
				fail(err)
			}
			if _, err := db.Compact(ctx, policy, engine.CompactOptions{Apply: true}); err != nil && ctx.Err() == nil {
				fail(err)
			}
		}
	}()
	firsts.Wait()
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	cancel()
	n.Wait()
	total := 0
	count.Range(func(_, v any) bool { total += v.(int); return true })
	if err := db.Close(); err != nil {
		fail(err)
	}
	fmt.Println("appended", total)
	os.Exit(0)
}

// startWriter starts writerHelper on dir and returns its pid and the
// function that stops it and returns how many records it appended.
func startWriter(t *testing.T, dir string) (int, func() int) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), writerHelperEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "ready" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("writer said %q\nstderr: %s", lines.Text(), errb.String())
	}
	stopped := false
	stop := func() int {
		if stopped {
			return 0
		}
		stopped = true
		_ = stdin.Close()
		var last string
		for lines.Scan() {
			last = lines.Text()
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("writer: %v (%s)\nstderr: %s", err, last, errb.String())
		}
		n, err := strconv.Atoi(strings.TrimPrefix(last, "appended "))
		if err != nil {
			t.Fatalf("writer said %q", last)
		}
		return n
	}
	t.Cleanup(func() { stop() })
	return cmd.Process.Pid, stop
}

// TestVerifyLogProveBesideAWriterProcess: while another process appends to
// the database (sealing segments, settling, truncating), verify, log and
// prove run in a loop for a fixed count, reading the files without the
// lock: every run succeeds, never with a finding, every proof verifies
// offline, and an anchor's log only grows. A read that needs the index is
// STATE_001, naming the writer's pid and the commands that work.
func TestVerifyLogProveBesideAWriterProcess(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	pid, stop := startWriter(t, dir)
	get := runCLI(t, "--dir", dir, "get", "k1", "--json")
	wantExit(t, get, exitUsage)
	e := obj(t, get.stdout)["error"].(map[string]any)
	if e["code"] != "STATE_001" || !strings.Contains(e["message"].(string), fmt.Sprintf("pid %d", pid)) ||
		!strings.Contains(e["message"].(string), "verify, log, prove") {
		t.Fatalf("get beside a writer: %v", get)
	}
	rounds := 12
	if testing.Short() {
		rounds = 4
	}
	sizes := map[string]uint64{}
	proofFile := filepath.Join(t.TempDir(), "p.json")
	for round := 0; round < rounds; round++ {
		v := runCLI(t, "--dir", dir, "verify", "--json")
		rep := obj(t, v.stdout)
		if v.code != 0 || rep["ok"] != true || rep["files"] == nil {
			t.Fatalf("round %d: verify beside a writer: %v", round, v)
		}
		if why := rep["files"].(map[string]any)["why"].(string); !strings.Contains(why, fmt.Sprintf("pid %d", pid)) {
			t.Fatalf("round %d: verify says why %q", round, why)
		}
		for _, a := range writerAnchors {
			p := runCLI(t, "--dir", dir, "prove", "inclusion", a, "1")
			if p.code != 0 {
				t.Fatalf("round %d: prove inclusion %s 1: %v", round, a, p)
			}
			if err := os.WriteFile(proofFile, []byte(p.stdout), 0o600); err != nil {
				t.Fatal(err)
			}
			mustRun(t, "verify-proof", proofFile)
			size, _ := strconv.ParseUint(string(obj(t, p.stdout)["size"].(json.Number)), 10, 64)
			if size < sizes[a] {
				t.Fatalf("round %d: anchor %s went from %d records to %d", round, a, sizes[a], size)
			}
			if old := sizes[a]; old > 0 {
				c := runCLI(t, "--dir", dir, "prove", "consistency", a, fmt.Sprint(old), fmt.Sprint(size))
				if c.code != 0 {
					t.Fatalf("round %d: prove consistency %s %d %d: %v", round, a, old, size, c)
				}
				if err := os.WriteFile(proofFile, []byte(c.stdout), 0o600); err != nil {
					t.Fatal(err)
				}
				mustRun(t, "verify-proof", proofFile)
			}
			sizes[a] = size
			from := max(size, 40) - 39
			l := runCLI(t, "--dir", dir, "log", a, "--from", fmt.Sprint(from), "--json")
			checkLogLines(t, l, from)
		}
	}
	if n := stop(); n == 0 {
		t.Fatal("the writer appended nothing")
	}
	// Once the writer is gone, the same commands read the index again.
	v := mustRun(t, "--dir", dir, "verify", "--json")
	if rep := obj(t, v.stdout); rep["ok"] != true || rep["files"] != nil {
		t.Fatalf("verify after the writer: %v", v)
	}
}

// checkLogLines checks the output of log --json from seq from: records
// in order, each linked to the one before; the only error a STATE_003 for
// records a truncation removed.
func checkLogLines(t *testing.T, r result, from uint64) {
	t.Helper()
	var prevSeq uint64
	var prevHash string
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if line == "" {
			continue
		}
		m := obj(t, line)
		if e, ok := m["error"].(map[string]any); ok {
			if e["code"] != "STATE_003" || r.code != exitFinding {
				t.Fatalf("log: %v", r)
			}
			continue
		}
		seq, _ := strconv.ParseUint(string(m["seq"].(json.Number)), 10, 64)
		if seq < from || (prevSeq > 0 && seq <= prevSeq) || (prevSeq > 0 && seq == prevSeq+1 && m["prev_hash"] != prevHash) {
			t.Fatalf("log: seq %d after %d does not follow on:\n%v", seq, prevSeq, r)
		}
		prevSeq, prevHash = seq, m["hash"].(string)
	}
	if r.code != 0 && r.code != exitFinding {
		t.Fatalf("log: %v", r)
	}
}

// TestReadOnlyCopyCreatesNothing: on a copy of a database that this user
// cannot write (chmod -R a-w; run as an unprivileged user when the tests
// run as root, whom permissions do not stop), every read command works
// without --read-only (it is chosen by itself), and a listing of the copy
// with sizes and mtimes is the same after them as before.
func TestReadOnlyCopyCreatesNothing(t *testing.T) {
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} { // reachable by the unprivileged user
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(base, "db")
	mustRun(t, "--dir", dir, "put", "dev-1", "color", "blue")
	for i := 0; i < 30; i++ {
		mustRun(t, "--dir", dir, "put", fmt.Sprintf("dev-%d", i%3), fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i))
	}
	keyPrefix := filepath.Join(base, "ops")
	mustRun(t, "keygen", "--out", keyPrefix)
	note := mustRun(t, "--dir", dir, "checkpoint", "create", "--key", keyPrefix+".key").stdout
	noteFile := filepath.Join(base, "cp.note")
	if err := os.WriteFile(noteFile, []byte(note), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "--dir", dir, "snapshot", "create")

	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: 65534, Gid: 65534} // nobody
	}
	bin := filepath.Join(base, "anchordb")
	copyFile(t, binary, bin, 0o755)
	for _, p := range []string{keyPrefix + ".pub", noteFile} {
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	chmodTree(t, dir, 0o555, 0o444) // chmod -R a-w, readable by all
	t.Cleanup(func() { chmodTree(t, dir, 0o755, 0o644) })
	before := listTree(t, dir)
	run := func(args ...string) result {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"--dir", dir}, args...)...)
		cmd.Dir = base
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + base, "TMPDIR=" + os.TempDir()}
		if cred != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
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
	// The user cannot write here: a write is refused, and creates nothing.
	if r := run("put", "dev-1", "k", "v"); r.code == 0 {
		t.Fatalf("a put on a copy this user cannot write: %v", r)
	}
	for _, args := range [][]string{
		{"get", "color", "--json"},
		{"history", "color"},
		{"scan"},
		{"log", "dev-1"},
		{"merge", "--json"},
		{"merge", "--root"},
		{"stats", "--json"},
		{"verify", "--json"},
		{"verify", "--pub", keyPrefix + ".pub"},
		{"prove", "inclusion", "dev-1", "2"},
		{"prove", "consistency", "dev-1", "1", "3"},
		{"prove", "frontier", "dev-1"},
		{"snapshot", "list"},
		{"snapshot", "verify"},
		{"checkpoint", "verify", noteFile, "--pub", keyPrefix + ".pub"},
		{"compact", "--policy", writePolicy(t, base)},
		{"--read-only", "log", "dev-2", "--json"},
	} {
		r := run(args...)
		if r.code != 0 {
			t.Fatalf("%v on a copy this user cannot write: %v", args, r)
		}
		if args[0] == "verify" && strings.Contains(r.stdout, `"files"`) {
			t.Fatalf("verify of a cleanly closed copy did not use its index: %v", r)
		}
	}
	if after := listTree(t, dir); !slices.Equal(before, after) {
		t.Fatalf("the read-only copy changed:\nbefore %q\nafter  %q", before, after)
	}
}

// TestReadOnlyFlagWritesNothing: --read-only opens without the lock on a
// directory this user could write too: reads work, writes are refused
// (IO_001, exit 2), and nothing changes.
func TestReadOnlyFlagWritesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	mustRun(t, "--dir", dir, "put", "a", "k", "v")
	before := listTree(t, dir)
	if r := mustRun(t, "--dir", dir, "--read-only", "get", "k", "--raw"); r.stdout != "v" {
		t.Fatalf("get --read-only: %v", r)
	}
	mustRun(t, "--dir", dir, "verify", "--read-only")
	r := runCLI(t, "--dir", dir, "--read-only", "put", "a", "k", "w", "--json")
	wantExit(t, r, exitUsage)
	if e := obj(t, r.stdout)["error"].(map[string]any); e["code"] != "IO_001" || !strings.Contains(e["message"].(string), "read-only") {
		t.Fatalf("put --read-only: %v", r)
	}
	r = runCLI(t, "--dir", dir, "--read-only", "rebuild-index", "--apply")
	if r.code != exitUsage || !strings.Contains(r.stderr, "read-only") {
		t.Fatalf("rebuild-index --apply --read-only: %v", r)
	}
	mustRun(t, "--dir", dir, "--read-only", "rebuild-index") // counts only
	if r := runCLI(t, "--read-only", "demo"); r.code != exitUsage {
		t.Fatalf("demo --read-only: %v", r)
	}
	if after := listTree(t, dir); !slices.Equal(before, after) {
		t.Fatalf("--read-only changed the database:\nbefore %q\nafter  %q", before, after)
	}
	if r := runCLI(t, "--dir", filepath.Join(t.TempDir(), "none"), "--read-only", "log", "a"); r.code != exitUsage || !strings.Contains(r.stderr, "no anchordb database") {
		t.Fatalf("--read-only of no database: %v", r)
	}
}

func writePolicy(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "policy.json")
	if err := os.WriteFile(p, []byte(`{"keep_snapshots":1,"raw_log":"truncate"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func copyFile(t *testing.T, from, to string, mode fs.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}

// chmodTree sets the mode of every entry under root (root included) to
// dir for directories, file for the rest.
func chmodTree(t *testing.T, root string, dir, file fs.FileMode) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		m := file
		if d.IsDir() {
			m = dir
		}
		return os.Chmod(p, m)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// listTree is every entry under root with its mode, size and mtime.
func listTree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		st, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out = append(out, fmt.Sprintf("%s %s %d %d", rel, st.Mode(), st.Size(), st.ModTime().UnixNano()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}
