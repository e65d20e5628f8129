package snapshot

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/zeebo/blake3"
)

const auditPath = "db/" + AuditFileName

// writeAuditLog appends n entries and returns the file's bytes.
func writeAuditLog(t *testing.T, fs vfs.FS, n int) []byte {
	t.Helper()
	if err := fs.MkdirAll("db", 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		a := Action{Kind: ActionRemoveSegment, Anchor: fmt.Sprintf("anchor-%d", i%3), Segno: uint64(i + 1), FirstSeq: 1, LastSeq: 10,
			Bytes: 4096, Hash: hashOf(fmt.Sprint(i)), Reason: "wholly below the cut"}
		e := a.AuditEntry(testCreated.Add(time.Duration(i)*time.Second), specPolicyRef)
		got, err := Append(fs, auditPath, e)
		if err != nil {
			t.Fatal(err)
		}
		if got.Seq != uint64(i+1) || got.Hash.IsZero() || (i == 0) != got.Prev.IsZero() {
			t.Fatalf("append %d returned %+v", i, got)
		}
	}
	return readFile(t, fs, auditPath)
}

func TestAuditRoundTrip(t *testing.T) {
	fs := vfs.NewMem()
	data := writeAuditLog(t, fs, 5)
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines", len(lines))
	}
	if !strings.HasPrefix(lines[0], `{"seq":1,"time":"2026-01-31T12:00:00.000000001Z","policy_ref":"`+specPolicyRef+`","action":"remove_segment","removed":[{"kind":"segment","anchor":"anchor-0","segno":1,"first_seq":1,"last_seq":10,"bytes":4096,"hash":"blake3:`) ||
		!strings.Contains(lines[0], `"added":[],"note":"wholly below the cut","prev":"blake3:0000000000000000000000000000000000000000000000000000000000000000","hash":"blake3:`) {
		t.Fatalf("line 1 is\n%s", lines[0])
	}
	var prev segment.Hash
	n := 0
	for e, err := range ReadAudit(fs, auditPath) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		if e.Seq != uint64(n) || e.Prev != prev || e.Removed[0].Segno != uint64(n) || !e.Time.Equal(testCreated.Add(time.Duration(n-1)*time.Second)) {
			t.Fatalf("entry %d: %+v", n, e)
		}
		prev = e.Hash
	}
	head, err := VerifyAudit(fs, auditPath)
	if err != nil || head.Lines != 5 || head.Head != prev || head.Torn != 0 {
		t.Fatalf("VerifyAudit = %+v, %v", head, err)
	}
	if head, err := VerifyAudit(fs, "db/none.log"); err != nil || head.Lines != 0 {
		t.Fatalf("missing log: %+v %v", head, err)
	}

	// Snapshot and cut entries carry their hashes too.
	info := Info{Name: "snapshot-x.snap", Size: 10, StateHash: hashOf("state"), FileHash: hashOf("file")}
	ce := Action{Kind: ActionCreateSnapshot, Trigger: "every_records"}.AuditEntry(testCreated, specPolicyRef)
	ce.Added = append(ce.Added, SnapshotItem(info))
	if _, err := Append(fs, auditPath, ce); err != nil {
		t.Fatal(err)
	}
	if _, err := Append(fs, auditPath, Action{Kind: ActionRecordCut, Anchor: "a", CutSeq: 9, Hash: hashOf("cut")}.AuditEntry(time.Time{}, specPolicyRef)); err != nil {
		t.Fatal(err)
	}
	var got []AuditEntry
	for e, err := range ReadAudit(fs, auditPath) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
	}
	if len(got) != 7 || got[5].Added[0].StateHash != info.StateHash || got[5].Added[0].Hash != info.FileHash ||
		got[6].Added[0].Kind != "cut" || got[6].Added[0].LastSeq != 9 || got[6].Time.IsZero() {
		t.Fatalf("entries %+v", got[5:])
	}
}

func auditError(t *testing.T, fs vfs.FS) *errs.Error {
	t.Helper()
	_, err := VerifyAudit(fs, auditPath)
	e := testutil.WantCode(t, err, errs.CodeChainBroken)
	if e.File != auditPath {
		t.Fatalf("error names %q", e.File)
	}
	// ReadAudit reports the same finding after the good lines.
	var last error
	for _, err := range ReadAudit(fs, auditPath) {
		last = err
	}
	if last == nil || last.Error() != e.Error() {
		t.Fatalf("ReadAudit ended with %v, VerifyAudit with %v", last, e)
	}
	return e
}

// TestAuditEveryByteEdit changes every byte of the third line (keeping it a
// non-newline byte) and checks the edit is caught at line 3 or, when it
// makes the line unparseable as such, still at line 3.
func TestAuditEveryByteEdit(t *testing.T) {
	fs := vfs.NewMem()
	data := writeAuditLog(t, fs, 5)
	starts := []int{0}
	for i, b := range data {
		if b == '\n' {
			starts = append(starts, i+1)
		}
	}
	for i := starts[2]; i < starts[3]-1; i++ {
		bad := slices.Clone(data)
		bad[i] ^= 0x01
		if bad[i] == '\n' {
			bad[i] ^= 0x03
		}
		writeFile(t, fs, auditPath, bad)
		if e := auditError(t, fs); e.Seq != 3 || e.Offset != int64(starts[2]) {
			t.Fatalf("edit at byte %d reported at line %d offset %d: %v", i, e.Seq, e.Offset, e)
		}
	}
}

func TestAuditTamper(t *testing.T) {
	fs := vfs.NewMem()
	data := writeAuditLog(t, fs, 5)
	lines := strings.SplitAfter(string(data), "\n")[:5]
	join := func(ls ...string) []byte { return []byte(strings.Join(ls, "")) }
	cases := []struct {
		name string
		data []byte
		line uint64
		msg  string
	}{
		{"line removed", join(lines[0], lines[1], lines[3], lines[4]), 3, "seq 4"},
		{"first line removed", join(lines[1:]...), 1, "seq 2"},
		{"lines swapped", join(lines[0], lines[2], lines[1], lines[3], lines[4]), 2, "seq 3"},
		{"line repeated", join(lines[0], lines[1], lines[1], lines[2]), 3, "seq 2"},
		{"blank line", join(lines[0], "\n", lines[1]), 2, "not an audit line"},
		{"value edited", []byte(strings.Replace(string(data), `"segno":2`, `"segno":7`, 1)), 2, "altered"},
		{"unknown field with a recomputed hash", join(string(reHash(t, lines[0], `{"seq":1,`, `{"seq":1,"x":1,`)), lines[1]), 1, "unknown field"},
		{"line rewritten with a recomputed hash", join(lines[0], string(reHash(t, lines[1], `"segno":2`, `"segno":7`)), lines[2]), 3, "does not link"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			writeFile(t, fs, auditPath, c.data)
			e := auditError(t, fs)
			if e.Seq != c.line || !strings.Contains(e.Message, c.msg) {
				t.Fatalf("got line %d %q, want line %d mentioning %q", e.Seq, e.Message, c.line, c.msg)
			}
		})
	}
	// A last line that does not check is what a crash leaves when a block of
	// an unfinished append is lost but its newline survives: it is a torn
	// tail, and Append writes over it. (Telling that from tampering needs a
	// head recorded elsewhere; the engine keeps one in its index.)
	writeFile(t, fs, auditPath, []byte(strings.Replace(string(data), `"segno":5`, `"segno":6`, 1)))
	head, err := VerifyAudit(fs, auditPath)
	if err != nil || head.Lines != 4 || head.Torn == 0 {
		t.Fatalf("altered last line: head %+v, err %v; want 4 lines and a torn tail", head, err)
	}
	e, err := Append(fs, auditPath, AuditEntry{Action: "x"})
	if err != nil || e.Seq != 5 {
		t.Fatalf("append over a torn last line: %+v %v", e, err)
	}
	if head, err := VerifyAudit(fs, auditPath); err != nil || head.Lines != 5 || head.Torn != 0 {
		t.Fatalf("after the append: %+v %v", head, err)
	}
	// A line that does not check in the middle is never taken for torn.
	writeFile(t, fs, auditPath, []byte(strings.Replace(string(data), `"segno":3`, `"segno":6`, 1)))
	_, err = Append(fs, auditPath, AuditEntry{Action: "x"})
	if err != nil {
		t.Fatalf("append after a damaged middle line reads only the tail: %v", err)
	}
	_, err = VerifyAudit(fs, auditPath)
	testutil.WantCode(t, err, errs.CodeChainBroken)
}

// reHash edits a line and recomputes its own hash, as a forger would.
func reHash(t *testing.T, line, old, new string) []byte {
	t.Helper()
	edited := strings.Replace(strings.TrimSuffix(line, "\n"), old, new, 1)
	if edited == strings.TrimSuffix(line, "\n") {
		t.Fatalf("%q not found in %s", old, line)
	}
	body := []byte(edited[:len(edited)-hashSuffixLen])
	var h segment.Hash
	blake3.DeriveKey(ContextAuditLine, body, h[:])
	return []byte(string(body) + `,"hash":"` + h.String() + "\"}\n")
}

// TestAuditTornTail checks that bytes after the last newline — a crash in
// the middle of an append — are reported, not fatal, and written over.
func TestAuditTornTail(t *testing.T) {
	for _, tornLen := range []int{1, 40, 2000} {
		fs := vfs.NewMem()
		data := writeAuditLog(t, fs, 3)
		torn := bytes.Repeat([]byte{'{'}, tornLen)
		writeFile(t, fs, auditPath, append(slices.Clone(data), torn...))
		head, err := VerifyAudit(fs, auditPath)
		if err != nil || head.Lines != 3 || head.Torn != int64(tornLen) {
			t.Fatalf("torn %d: %+v %v", tornLen, head, err)
		}
		e, err := Append(fs, auditPath, AuditEntry{Action: "after_crash", PolicyRef: specPolicyRef})
		if err != nil || e.Seq != 4 || e.Prev != head.Head {
			t.Fatalf("append over torn tail: %+v %v", e, err)
		}
		head, err = VerifyAudit(fs, auditPath)
		if err != nil || head.Lines != 4 || head.Torn != 0 || head.Head != e.Hash {
			t.Fatalf("after append over %d torn bytes: %+v %v", tornLen, head, err)
		}
	}
	// A log that is nothing but a torn tail.
	fs := vfs.NewMem()
	_ = fs.MkdirAll("db", 0o755)
	writeFile(t, fs, auditPath, []byte(`{"seq":1,"ti`))
	if e, err := Append(fs, auditPath, AuditEntry{Action: "first"}); err != nil || e.Seq != 1 {
		t.Fatalf("append over a torn first line: %+v %v", e, err)
	}
	if head, err := VerifyAudit(fs, auditPath); err != nil || head.Lines != 1 {
		t.Fatalf("%+v %v", head, err)
	}
}
