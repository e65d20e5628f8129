package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestProveFrontierAndBindToCheckpoint: CONTRACT §5's third proof (an anchor's
// entry in a checkpoint's frontier root) from the CLI, and verify-proof
// --checkpoint --pub, which holds every kind of proof to what a signed
// checkpoint says rather than to the root the proof carries.
func TestProveFrontierAndBindToCheckpoint(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "db")
	write := func(name, s string) string {
		t.Helper()
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fillDB(t, dir, []string{"dev-1", "dev-2", "dev-3"}, 30)

	// No checkpoint yet: nothing to prove against.
	r := runCLI(t, "--dir", dir, "--json", "prove", "frontier", "dev-1")
	wantExit(t, r, 1)
	errObj(t, r, "STATE_003")

	k := filepath.Join(tmp, "k")
	mustRun(t, "keygen", "--out", k)
	mustRun(t, "keygen", "--out", filepath.Join(tmp, "other"))
	note := write("cp.note", mustRun(t, "--dir", dir, "checkpoint", "create", "--key", k+".key").stdout)
	pub := k + ".pub"
	cp := obj(t, mustRun(t, "--json", "checkpoint", "verify", note, "--pub", pub).stdout)
	var size int64
	for _, e := range cp["entries"].([]any) {
		if e := e.(map[string]any); e["anchor"] == "dev-2" {
			size = num(t, e, "size")
		}
	}
	if size == 0 {
		t.Fatalf("dev-2 not in the checkpoint: %v", cp)
	}
	// The database moves on past the checkpoint.
	mustRun(t, "--dir", dir, "put", "dev-2", "later", "v")

	r = mustRun(t, "--dir", dir, "prove", "frontier", "dev-2")
	if got := keysInOrder(t, r.stdout); strings.Join(got, ",") != "anchor,size,anchor_root,index,anchors,root,proof,origin,kind" {
		t.Fatalf("frontier keys %v", got)
	}
	fm := obj(t, r.stdout)
	if num(t, fm, "size") != size || num(t, fm, "index") != 1 || num(t, fm, "anchors") != 3 || fm["root"] != cp["root"] || fm["origin"] != cp["origin"] {
		t.Fatalf("frontier proof %v against checkpoint %v", fm, cp)
	}
	frontier := write("frontier.json", r.stdout)
	// From the note alone, without a database: the same proof.
	r = cli(t, []byte(mustRead(t, note)), []string{"--dir", filepath.Join(tmp, "none"), "prove", "frontier", "dev-2", "--checkpoint", "-"})
	if r.code != 0 || r.stdout != mustRead(t, frontier) {
		t.Fatalf("prove frontier --checkpoint -: %v", r)
	}
	if _, err := os.Stat(filepath.Join(tmp, "none")); err == nil {
		t.Fatal("prove frontier --checkpoint created a database")
	}

	inclAt := write("incl-at.json", mustRun(t, "--dir", dir, "prove", "inclusion", "dev-2", "7", "--size", itoa(size)).stdout)
	inclNow := write("incl-now.json", mustRun(t, "--dir", dir, "prove", "inclusion", "dev-2", "7").stdout)
	consTo := write("cons-to.json", mustRun(t, "--dir", dir, "prove", "consistency", "dev-2", "3", itoa(size)).stdout)
	consFrom := write("cons-from.json", mustRun(t, "--dir", dir, "prove", "consistency", "dev-2", itoa(size), itoa(size+1)).stdout)
	consPast := write("cons-past.json", mustRun(t, "--dir", dir, "prove", "consistency", "dev-2", "3", itoa(size+1)).stdout)
	otherAnchor := write("incl-dev-3.json", mustRun(t, "--dir", dir, "prove", "inclusion", "dev-3", "7", "--size", itoa(size)).stdout)

	for _, p := range []string{frontier, inclAt, consTo, consFrom} {
		r = mustRun(t, "--json", "verify-proof", p, "--checkpoint", note, "--pub", pub)
		m := obj(t, r.stdout)
		c, _ := m["checkpoint"].(map[string]any)
		if m["ok"] != true || c == nil || c["root"] != cp["root"] || !strings.Contains(str(t, m, "description"), "as signed by checkpoint") {
			t.Fatalf("verify-proof %s --checkpoint: %v", filepath.Base(p), m)
		}
	}
	// Each verifies on its own, and is not about what the checkpoint signs.
	for _, p := range []string{inclNow, consPast} {
		mustRun(t, "verify-proof", p)
		r = runCLI(t, "--json", "verify-proof", p, "--checkpoint", note, "--pub", pub)
		wantExit(t, r, 1)
		errObj(t, r, "INT_001")
	}
	// A proof about dev-3's tree binds as dev-3's, and not when relabelled
	// as dev-2's.
	mustRun(t, "verify-proof", otherAnchor, "--checkpoint", note, "--pub", pub)
	forged := write("forged.json", strings.Replace(mustRead(t, otherAnchor), `"dev-3"`, `"dev-2"`, 1))
	mustRun(t, "verify-proof", forged) // an inclusion proof does not commit to its anchor id
	r = runCLI(t, "--json", "verify-proof", forged, "--checkpoint", note, "--pub", pub)
	wantExit(t, r, 1)
	errObj(t, r, "INT_001")

	// The checkpoint must verify under the key.
	r = runCLI(t, "--json", "verify-proof", inclAt, "--checkpoint", note, "--pub", filepath.Join(tmp, "other.pub"))
	wantExit(t, r, 1)
	errObj(t, r, "AUTH_003")
	altered := write("altered.note", strings.Replace(mustRead(t, note), "anchor \"dev-2\" "+itoa(size), "anchor \"dev-2\" "+itoa(size+1), 1))
	r = runCLI(t, "--json", "verify-proof", inclAt, "--checkpoint", altered, "--pub", pub)
	wantExit(t, r, 1)
	errObj(t, r, "AUTH_003")

	for _, args := range [][]string{
		{"verify-proof", inclAt, "--checkpoint", note},
		{"verify-proof", inclAt, "--pub", pub},
		{"verify-proof", "-", "--checkpoint", "-", "--pub", pub},
		{"--dir", dir, "prove", "frontier"},
		{"--dir", dir, "prove", "frontier", "dev-2", "--size", "3"},
		{"--dir", dir, "prove", "inclusion", "dev-2", "3", "--checkpoint", note},
		{"--dir", dir, "prove", "frontier", "dev-2", "--checkpoint", filepath.Join(tmp, "missing.note")},
	} {
		r = runCLI(t, append([]string{"--json"}, args...)...)
		wantExit(t, r, 2)
		errObj(t, r, "INPUT_001")
	}
	r = runCLI(t, "--json", "--dir", dir, "prove", "frontier", "dev-9")
	wantExit(t, r, 1)
	errObj(t, r, "STATE_003")
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
