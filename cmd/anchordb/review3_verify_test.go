package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// codeTextRE matches a "CODE reason" pair as the coded errors print it.
var codeTextRE = regexp.MustCompile(`[A-Z]+_[0-9]{3} [a-z_]+`)

// TestVerifyJSONSnapshotFinding: verify --json reports a damaged snapshot
// at the byte offset snapshot verify reports for it (SPEC §10's "offset" of
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
	wantCode(t, r, 1)
	want := obj(t, r.stdout)["error"].(map[string]any)
	wantOff := num(t, want, "offset")
	if wantOff == 0 {
		t.Fatalf("snapshot verify locates no offset: %v", r)
	}

	r = runCLI(t, "--dir", dir, "--json", "verify")
	wantCode(t, r, 1)
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
	wantCode(t, r, 1)
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
