package main

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/segment"
	"golang.org/x/mod/sumdb/note"
)

// fillDB appends n records to each of the anchors through the CLI's import.
func fillDB(t *testing.T, dir string, anchors []string, n int) {
	t.Helper()
	var b strings.Builder
	for i := 0; i < n; i++ {
		for _, a := range anchors {
			fmt.Fprintf(&b, `{"anchor":%q,"type":"put","key":"k%d","value":"v%d"}`+"\n", a, i%7, i)
		}
	}
	r := cli(t, []byte(b.String()), []string{"--dir", dir, "--json", "import", "-"})
	if r.code != 0 {
		t.Fatalf("import: %v", r)
	}
}

// segmentFiles returns the anchor's segment files, oldest first.
func segmentFiles(t *testing.T, dir, anchor string) []string {
	t.Helper()
	id := segment.AnchorPathID(anchor)
	files, err := filepath.Glob(filepath.Join(dir, segment.AnchorsDir, id[:2], id[2:], "*.seg"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no segments of %s: %v", anchor, err)
	}
	return files
}

var findingKeys = []string{"code", "reason", "anchor", "seq", "file", "offset", "message"}

func TestVerifyCommand(t *testing.T) {
	dir := t.TempDir()
	fillDB(t, dir, []string{"dev-1", "dev-2", "dev-3"}, 40)

	r := mustRun(t, "--dir", dir, "--json", "verify")
	if got := keysInOrder(t, r.stdout); strings.Join(got, ",") != "ok,anchors,records,bytes,failures" {
		t.Fatalf("verify keys %v", got)
	}
	m := obj(t, r.stdout)
	if m["ok"] != true || num(t, m, "anchors") != 3 || num(t, m, "records") != 120 || len(m["failures"].([]any)) != 0 {
		t.Fatalf("verify: %v", m)
	}
	m = obj(t, mustRun(t, "--dir", dir, "--json", "verify", "--anchor", "dev-2", "--anchor", "dev-3", "--threads", "1").stdout)
	if num(t, m, "anchors") != 2 || num(t, m, "records") != 80 {
		t.Fatalf("restricted verify: %v", m)
	}
	r = mustRun(t, "--dir", dir, "verify")
	if !strings.HasPrefix(r.stdout, "verify ok: 3 anchors, 120 records") {
		t.Fatalf("human: %v", r)
	}
	if r = mustRun(t, "--dir", dir, "verify", "--quiet"); r.stdout != "" || r.stderr != "" {
		t.Fatalf("quiet: %v", r)
	}

	r = runCLI(t, "--dir", dir, "--json", "verify", "--anchor", "nope")
	wantExit(t, r, 1)
	errObj(t, r, "STATE_003")
	for _, args := range [][]string{{"verify", "--threads", "-1"}, {"verify", "--from-checkpoint", "x"}, {"verify", "extra"}} {
		r = runCLI(t, append([]string{"--dir", dir, "--json"}, args...)...)
		wantExit(t, r, 2)
		errObj(t, r, "INPUT_001")
	}

	// Damage one record of dev-2: exit 1, a finding naming it.
	seg := segmentFiles(t, dir, "dev-2")[0]
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	hsize := segment.HeaderSize("dev-2")
	bad := bytes.Clone(data)
	bad[hsize+30] ^= 0x10 // inside the first frame's body
	if err := os.WriteFile(seg, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, "--dir", dir, "--json", "verify")
	wantExit(t, r, 1)
	m = obj(t, r.stdout)
	fails := m["failures"].([]any)
	if m["ok"] != false || len(fails) == 0 {
		t.Fatalf("damaged verify: %v", r)
	}
	first := fails[0].(map[string]any)
	fj, _ := marshal(first)
	if got := keysInOrder(t, string(fj)); len(got) != len(findingKeys) {
		t.Fatalf("finding keys %v", got)
	}
	if first["code"] != "INT_001" || first["reason"] != "hash_mismatch" || first["anchor"] != "dev-2" || num(t, first, "seq") != 1 ||
		first["file"] != seg || num(t, first, "offset") != int64(hsize) {
		t.Fatalf("finding %v", first)
	}
	r = runCLI(t, "--dir", dir, "verify")
	wantExit(t, r, 1)
	if !strings.Contains(r.stdout, "verify FAILED: ") || !strings.Contains(r.stdout, "INT_001 hash_mismatch anchor=dev-2 seq=1") {
		t.Fatalf("human damaged: %v", r)
	}
	// The other anchors still verify on their own.
	mustRun(t, "--dir", dir, "verify", "--anchor", "dev-1", "--anchor", "dev-3")
	r = runCLI(t, "--dir", dir, "--json", "verify", "--stop-at-first")
	wantExit(t, r, 1)
	if n := len(obj(t, r.stdout)["failures"].([]any)); n != 1 {
		t.Fatalf("--stop-at-first: %d findings", n)
	}
	// CONTRACT §3: what verify found makes the anchor read-only, also after the
	// bytes are put back, until the operator rebuilds the index
	// (docs/RELIABILITY.md); the other anchors take appends.
	if err := os.WriteFile(seg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, "--dir", dir, "--json", "put", "dev-2", "k", "v")
	wantExit(t, r, 1)
	errObj(t, r, "INT_001")
	mustRun(t, "--dir", dir, "put", "dev-1", "k", "v")
	mustRun(t, "--dir", dir, "rebuild-index", "--apply")
	mustRun(t, "--dir", dir, "verify")
	mustRun(t, "--dir", dir, "put", "dev-2", "k", "v")
}

func TestKeygen(t *testing.T) {
	dir := t.TempDir()
	prefix := filepath.Join(dir, "k1")
	r := mustRun(t, "keygen", "--name", "ops.example", "--out", prefix)
	vkey := strings.TrimSpace(r.stdout)
	if !strings.HasPrefix(vkey, "ops.example+") {
		t.Fatalf("keygen printed %q", r.stdout)
	}
	st, err := os.Stat(prefix + ".key")
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	key, _ := os.ReadFile(prefix + ".key")
	pub, _ := os.ReadFile(prefix + ".pub")
	if !strings.HasPrefix(string(key), "PRIVATE+KEY+ops.example+") || strings.TrimSpace(string(pub)) != vkey {
		t.Fatalf("files: %q %q", key, pub)
	}
	r = runCLI(t, "--json", "keygen", "--out", prefix)
	wantExit(t, r, 2)
	errObj(t, r, "INPUT_001")
	if again, _ := os.ReadFile(prefix + ".key"); !bytes.Equal(again, key) {
		t.Fatal("an existing key was overwritten")
	}
	m := obj(t, mustRun(t, "--json", "keygen", "--out", prefix, "--force").stdout)
	if str(t, m, "name") != "anchordb" || str(t, m, "key_file") != prefix+".key" || !strings.HasPrefix(str(t, m, "verifier_key"), "anchordb+") {
		t.Fatalf("keygen json %v", m)
	}
	r = runCLI(t, "--json", "keygen", "--name", "bad name", "--out", filepath.Join(dir, "k2"))
	wantExit(t, r, 2)
	errObj(t, r, "INPUT_001")
	// --out is a file prefix: a directory, or a name ending in '/', would
	// make the hidden files DIR/.key and DIR/.pub.
	sub := filepath.Join(dir, "keys")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{sub, sub + "/", filepath.Join(dir, "absent") + "/", sub + "/."} {
		r = runCLI(t, "--json", "keygen", "--out", out)
		wantExit(t, r, 2)
		errObj(t, r, "INPUT_001")
	}
	if ents, _ := os.ReadDir(sub); len(ents) != 0 {
		t.Fatalf("keygen --out DIR wrote %v", ents)
	}
	if _, err := os.Stat(filepath.Join(dir, "absent")); err == nil {
		t.Fatal("keygen --out absent/ made a directory")
	}
	// The default prefix is ./anchordb.
	cmd := exec.Command(binary, "keygen")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil || !strings.HasPrefix(string(out), "anchordb+") {
		t.Fatalf("keygen in %s: %s %v", dir, out, err)
	}
	for _, f := range []string{"anchordb.key", "anchordb.pub"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCheckpointCommands(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "db")
	fillDB(t, dir, []string{"a", "b"}, 10)
	k := filepath.Join(tmp, "signer")
	mustRun(t, "keygen", "--name", "signer", "--out", k)
	r := mustRun(t, "--dir", dir, "checkpoint", "create", "--key", k+".key")
	note := r.stdout
	if !strings.HasPrefix(note, "anchordb/") || !strings.Contains(note, "\nanchors 2\nrecords 20\n") || !strings.Contains(note, "\n— signer ") {
		t.Fatalf("note:\n%s", note)
	}
	notePath := filepath.Join(tmp, "c1.note")
	if err := os.WriteFile(notePath, []byte(note), 0o644); err != nil {
		t.Fatal(err)
	}
	stored, _ := filepath.Glob(filepath.Join(dir, "checkpoints", "*.note"))
	if len(stored) != 1 {
		t.Fatalf("stored checkpoints: %v", stored)
	}
	if b, _ := os.ReadFile(stored[0]); string(b) != note {
		t.Fatal("the stored checkpoint is not the printed one")
	}
	// Verify needs no database.
	r = mustRun(t, "--dir", filepath.Join(tmp, "none"), "--json", "checkpoint", "verify", notePath, "--pub", k+".pub")
	m := obj(t, r.stdout)
	if m["ok"] != true || num(t, m, "anchors") != 2 || num(t, m, "records") != 20 || len(m["entries"].([]any)) != 2 {
		t.Fatalf("checkpoint verify: %v", m)
	}
	if _, err := os.Stat(filepath.Join(tmp, "none")); err == nil {
		t.Fatal("checkpoint verify created a database")
	}
	r = cli(t, []byte(note), []string{"checkpoint", "verify", "-", "--pub", k + ".pub"})
	if r.code != 0 || !strings.HasPrefix(r.stdout, "checkpoint verified: anchordb/") {
		t.Fatalf("from stdin: %v", r)
	}

	// Forged: the text changed; re-signed with another key.
	forged := strings.Replace(note, "records 20", "records 21", 1)
	other := filepath.Join(tmp, "other")
	mustRun(t, "keygen", "--name", "signer", "--out", other)
	mustRun(t, "--dir", filepath.Join(tmp, "db2"), "put", "a", "k", "v")
	resigned := mustRun(t, "--dir", filepath.Join(tmp, "db2"), "checkpoint", "create", "--key", other+".key").stdout
	// Not a signed note at all: a malformed file, INPUT_001 (CONTRACT §8).
	pubText, err := os.ReadFile(k + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"garbage": "hello\n", "empty": "", "pub file": string(pubText), "truncated": note[:40]} {
		p := filepath.Join(tmp, name+".note")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		r = runCLI(t, "--json", "checkpoint", "verify", p, "--pub", k+".pub")
		wantExit(t, r, 2)
		errObj(t, r, "INPUT_001")
	}
	for name, text := range map[string]string{"forged": forged, "resigned": resigned} {
		p := filepath.Join(tmp, name+".note")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		r = runCLI(t, "--json", "checkpoint", "verify", p, "--pub", k+".pub")
		wantExit(t, r, 1)
		errObj(t, r, "AUTH_003")
		r = runCLI(t, "checkpoint", "verify", p, "--pub", k+".pub")
		if r.code != 1 || !strings.Contains(r.stderr, "AUTH_003 signature_invalid") {
			t.Fatalf("%s, human: %v", name, r)
		}
	}

	// A second checkpoint after more appends; JSON shape.
	fillDB(t, dir, []string{"a", "c"}, 3)
	m = obj(t, mustRun(t, "--dir", dir, "--json", "checkpoint", "create", "--key", k+".key").stdout)
	if num(t, m, "records") != 26 || num(t, m, "anchors") != 3 || !strings.HasSuffix(str(t, m, "file"), ".note") || !strings.Contains(str(t, m, "note"), "\nrecords 26\n") {
		t.Fatalf("create json: %v", m)
	}
	// Verify from the first checkpoint, and with the stored ones' signatures.
	r = mustRun(t, "--dir", dir, "--json", "verify", "--from-checkpoint", notePath, "--pub", k+".pub")
	if m = obj(t, r.stdout); m["ok"] != true || num(t, m, "records") != 6 {
		t.Fatalf("incremental verify: %v", m)
	}
	r = runCLI(t, "--dir", dir, "--json", "verify", "--from-checkpoint", filepath.Join(tmp, "forged.note"), "--pub", k+".pub")
	wantExit(t, r, 1)
	errObj(t, r, "AUTH_003")
	r = runCLI(t, "--dir", dir, "--json", "verify", "--pub", other+".pub")
	wantExit(t, r, 1)
	if f := obj(t, r.stdout)["failures"].([]any)[0].(map[string]any); f["code"] != "AUTH_003" {
		t.Fatalf("stored checkpoints with another key: %v", r)
	}

	for _, args := range [][]string{{"checkpoint", "create"}, {"checkpoint", "verify", notePath}, {"checkpoint", "sign", "--key", "x"},
		{"checkpoint", "create", "--key", k + ".key", "--pub", k + ".pub"}, {"checkpoint", "create", "--key", filepath.Join(tmp, "missing")}} {
		r = runCLI(t, append([]string{"--dir", dir, "--json"}, args...)...)
		wantExit(t, r, 2)
		errObj(t, r, "INPUT_001")
	}
}

func TestProveCommands(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "db")
	fillDB(t, dir, []string{"dev-1"}, 300)
	r := mustRun(t, "--dir", dir, "prove", "inclusion", "dev-1", "257")
	if got := keysInOrder(t, r.stdout); strings.Join(got, ",") != "anchor,seq,size,leaf,root,proof,kind" {
		t.Fatalf("inclusion keys %v", got)
	}
	m := obj(t, r.stdout)
	if num(t, m, "seq") != 257 || num(t, m, "size") != 300 || !hashRE.MatchString(str(t, m, "leaf")) || len(m["proof"].([]any)) == 0 {
		t.Fatalf("inclusion %v", m)
	}
	var rec map[string]any
	for _, l := range lines(t, mustRun(t, "--dir", dir, "--json", "log", "dev-1", "--from", "257", "--to", "257").stdout) {
		rec = l
	}
	if rec["hash"] != m["leaf"] {
		t.Fatalf("leaf %v is not the record hash %v", m["leaf"], rec["hash"])
	}
	incl := filepath.Join(tmp, "incl.json")
	os.WriteFile(incl, []byte(r.stdout), 0o644)
	m2 := obj(t, mustRun(t, "--dir", dir, "prove", "inclusion", "dev-1", "3", "--size", "256").stdout)
	if num(t, m2, "size") != 256 {
		t.Fatalf("--size: %v", m2)
	}
	r = mustRun(t, "--dir", dir, "prove", "consistency", "dev-1", "256", "300")
	if got := keysInOrder(t, r.stdout); strings.Join(got, ",") != "anchor,old_size,new_size,old_root,new_root,proof,kind" {
		t.Fatalf("consistency keys %v", got)
	}
	cons := filepath.Join(tmp, "cons.json")
	os.WriteFile(cons, []byte(r.stdout), 0o644)
	if obj(t, r.stdout)["new_root"] != m["root"] {
		t.Fatal("consistency new root is not the inclusion root at the same size")
	}

	// verify-proof: offline, from a file or stdin.
	for _, p := range []string{incl, cons} {
		r = mustRun(t, "--dir", filepath.Join(tmp, "none"), "verify-proof", p)
		if !strings.HasPrefix(r.stdout, "verified ") {
			t.Fatalf("verify-proof %s: %v", p, r)
		}
	}
	data, _ := os.ReadFile(incl)
	r = cli(t, data, []string{"--json", "verify-proof", "-"})
	if r.code != 0 || obj(t, r.stdout)["kind"] != "inclusion" {
		t.Fatalf("verify-proof stdin: %v", r)
	}
	if _, err := os.Stat(filepath.Join(tmp, "none")); err == nil {
		t.Fatal("verify-proof created a database")
	}
	// One changed hex digit anywhere in a hash: exit 1.
	root := str(t, m, "root")
	flipped := root[:20] + string("0123456789abcdef"[(strings.IndexByte("0123456789abcdef", root[20])+1)%16]) + root[21:]
	r = cli(t, []byte(strings.Replace(string(data), root, flipped, 1)), []string{"--json", "verify-proof", "-"})
	wantExit(t, r, 1)
	errObj(t, r, "INT_001")
	// Not a proof: exit 2.
	for _, bad := range []string{"{", `{"anchor":"a"}`, `{"anchor":"a","seq":1,"size":1,"leaf":"x","root":"y","proof":[]}`, ""} {
		r = cli(t, []byte(bad), []string{"--json", "verify-proof", "-"})
		wantExit(t, r, 2)
		errObj(t, r, "INPUT_001")
	}
	r = runCLI(t, "--json", "verify-proof", filepath.Join(tmp, "missing.json"))
	wantExit(t, r, 2)

	// Refusals.
	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"prove", "inclusion", "dev-1", "301"}, 1, "STATE_003"},
		{[]string{"prove", "inclusion", "dev-1", "5", "--size", "301"}, 1, "STATE_003"},
		{[]string{"prove", "inclusion", "nope", "1"}, 1, "STATE_003"},
		{[]string{"prove", "consistency", "dev-1", "5", "400"}, 1, "STATE_003"},
		{[]string{"prove", "consistency", "dev-1", "9", "8"}, 2, "INPUT_001"},
		{[]string{"prove", "inclusion", "dev-1", "0"}, 2, "INPUT_001"},
		{[]string{"prove", "inclusion", "dev-1", "x"}, 2, "INPUT_001"},
		{[]string{"prove", "consistency", "dev-1", "1"}, 2, "INPUT_001"},
		{[]string{"prove", "frontier", "dev-1", "1"}, 2, "INPUT_001"},
		{[]string{"prove", "consistency", "dev-1", "1", "2", "--size", "3"}, 2, "INPUT_001"},
	} {
		r = runCLI(t, append([]string{"--dir", dir, "--json"}, c.args...)...)
		if r.code != c.code {
			t.Errorf("%v: want exit %d, got %v", c.args, c.code, r)
			continue
		}
		errObj(t, r, c.err)
	}
}

// TestVerifyMalformedPubKey: verify --pub with a file that is no verifier
// key is bad input (INPUT_001, exit 2), as for checkpoint verify — not an
// AUTH_003 finding on every stored checkpoint, nor, with none stored, a
// clean pass that ignored the key.
func TestVerifyMalformedPubKey(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "db")
	bad := filepath.Join(tmp, "bad.pub")
	if err := os.WriteFile(bad, []byte("this is not a verifier key\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "--dir", dir, "put", "a", "k", "v")

	// No stored checkpoint: the bad key is silently ignored.
	r := runCLI(t, "--dir", dir, "--json", "verify", "--pub", bad)
	if r.code != 2 || !strings.Contains(r.stdout, `"INPUT_001"`) {
		t.Errorf("verify --pub <malformed key>, no checkpoints: want INPUT_001, exit 2; got %v", r)
	}

	// With a stored checkpoint: reported as a signature failure of the database.
	mustRun(t, "keygen", "--out", filepath.Join(tmp, "k"))
	mustRun(t, "--dir", dir, "checkpoint", "create", "--key", filepath.Join(tmp, "k.key"))
	r = runCLI(t, "--dir", dir, "--json", "verify", "--pub", bad)
	if r.code != 2 || !strings.Contains(r.stdout, `"INPUT_001"`) {
		t.Errorf("verify --pub <malformed key>, one checkpoint: want INPUT_001, exit 2; got %v", r)
	}
	// For comparison: checkpoint verify refuses the same key file up front.
	cp := filepath.Join(tmp, "cp.note")
	out := mustRun(t, "--dir", dir, "checkpoint", "create", "--key", filepath.Join(tmp, "k.key")).stdout
	if err := os.WriteFile(cp, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, "--json", "checkpoint", "verify", cp, "--pub", bad)
	wantExit(t, r, 2)
	errObj(t, r, "INPUT_001")
}

// TestKeyNameWithControlCharacter: the note package opens no note holding
// an ASCII control character other than newline, yet generates keys whose
// names hold one. Such a key used to sign a checkpoint that no one could
// open; stored in the database, it failed every later verify --pub and
// refused every later checkpoint create (STATE_002: the latest stored
// checkpoint cannot be read). keygen refuses the name, and checkpoint
// create refuses a signer key with such a name made elsewhere, storing
// nothing.
func TestKeyNameWithControlCharacter(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "db")
	mustRun(t, "--dir", dir, "put", "a", "k", "v")

	bad := filepath.Join(tmp, "bad")
	r := runCLI(t, "--json", "keygen", "--name", "a\x01b", "--out", bad)
	wantExit(t, r, 2)
	errObj(t, r, "INPUT_001")
	if _, err := os.Stat(bad + ".key"); err == nil {
		t.Fatal("keygen wrote a key file for a refused name")
	}

	skey, _, err := note.GenerateKey(rand.Reader, "a\x1fb")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad+".key", []byte(skey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, "--dir", dir, "--json", "checkpoint", "create", "--key", bad+".key")
	wantExit(t, r, 2)
	errObj(t, r, "INPUT_001")

	// Nothing was stored: a good key still signs, and verify finds nothing.
	good := filepath.Join(tmp, "good")
	mustRun(t, "keygen", "--out", good)
	mustRun(t, "--dir", dir, "checkpoint", "create", "--key", good+".key")
	if m := obj(t, mustRun(t, "--dir", dir, "--json", "verify", "--pub", good+".pub").stdout); m["ok"] != true {
		t.Fatalf("verify after the refused checkpoint: %v", m)
	}
}

// TestHumanErrorIsOneLine: without --json an error is one line on stderr
// (main's contract), also when the error it wraps prints on several, as the
// merkle package's root mismatch of a proof that does not verify does.
func TestHumanErrorIsOneLine(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "db")
	fillDB(t, dir, []string{"a"}, 4)
	p := obj(t, mustRun(t, "--dir", dir, "prove", "inclusion", "a", "1").stdout)
	p["seq"] = 2 // the proof of seq 1 does not prove seq 2
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(tmp, "p.json")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "verify-proof", f)
	wantExit(t, r, 1)
	if !strings.HasPrefix(r.stderr, "anchordb: INT_001 hash_mismatch: ") || strings.Count(r.stderr, "\n") != 1 || !strings.HasSuffix(r.stderr, "\n") {
		t.Fatalf("want one line on stderr, got %q", r.stderr)
	}
}

// codeTextRE matches a "CODE reason" pair as the coded errors print it.
var codeTextRE = regexp.MustCompile(`[A-Z]+_[0-9]{3} [a-z_]+`)

// TestVerifyJSONSnapshotFinding: verify --json reports a damaged snapshot
// at the byte offset snapshot verify reports for it (CONTRACT §10's "offset" of
// a failure), with a message that does not repeat the code; the human line
// names the code once and the same offset.
func TestVerifyJSONSnapshotFinding(t *testing.T) {
	dir := t.TempDir()
	fillDB(t, dir, []string{"dev-1", "dev-2"}, 30)
	snap := str(t, obj(t, mustRun(t, "--dir", dir, "--json", "snapshot", "create").stdout), "path")
	data, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 1
	if err := os.WriteFile(snap, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "--dir", dir, "--json", "snapshot", "verify")
	wantExit(t, r, 1)
	want := obj(t, r.stdout)["error"].(map[string]any)
	wantOff := num(t, want, "offset")
	if wantOff == 0 {
		t.Fatalf("snapshot verify locates no offset: %v", r)
	}

	r = runCLI(t, "--dir", dir, "--json", "verify")
	wantExit(t, r, 1)
	fails := obj(t, r.stdout)["failures"].([]any)
	if len(fails) != 1 {
		t.Fatalf("verify: %v", r)
	}
	f := fails[0].(map[string]any)
	if f["code"] != "INT_003" || f["reason"] != "snapshot_corrupted" || f["file"] != snap || num(t, f, "offset") != wantOff {
		t.Errorf("finding %v; want INT_003 in %s at offset %d", f, filepath.Base(snap), wantOff)
	}
	if msg := str(t, f, "message"); codeTextRE.MatchString(msg) || msg != want["message"] {
		t.Errorf("finding message %q; want snapshot verify's %q, without a code", msg, want["message"])
	}

	r = runCLI(t, "--dir", dir, "verify")
	wantExit(t, r, 1)
	var line string
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "INT_003") {
			line = l
		}
	}
	if n := len(codeTextRE.FindAllString(line, -1)); n != 1 || !strings.Contains(line, "offset="+strconv.FormatInt(wantOff, 10)) {
		t.Errorf("human finding %q: want one code and offset=%d", line, wantOff)
	}
}
