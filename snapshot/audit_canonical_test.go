package snapshot

import (
	"strings"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestAuditLineNotCanonical: a line whose own hash checks but whose JSON is
// not what Append writes (FORMAT.md §9, "Line layout") is refused. Go's JSON
// decoder matches field names case-insensitively and lets a repeated field
// win, so without the check a line could read as one action to a
// case-sensitive reader and as another to the engine. Every entry has one
// encoding; a line in any other is not one the database wrote.
func TestAuditLineNotCanonical(t *testing.T) {
	fs := vfs.NewMem()
	line := string(writeAuditLog(t, fs, 1))
	for _, c := range []struct{ name, old, new string }{
		{"a field again, in other case", `"added":[]`, `"added":[],"ACTION":"record_cut"`},
		{"a field twice", `"added":[]`, `"added":[],"added":[]`},
		{"a field name in other case", `"policy_ref"`, `"Policy_Ref"`},
		{"space between fields", `,"removed"`, `, "removed"`},
		{"an escape Marshal does not write", `"action":"`, `"\u0061ction":"`},
		{"fields reordered", `"seq":1,"time":"2026-01-31T12:00:00.000000001Z"`, `"time":"2026-01-31T12:00:00.000000001Z","seq":1`},
		{"null for an empty list", `"added":[]`, `"added":null`},
		{"a time not in UTC", `"2026-01-31T12:00:00.000000001Z"`, `"2026-01-31T13:00:00.000000001+01:00"`},
		{"a time with trailing zeros", `"2026-01-31T12:00:00.000000001Z"`, `"2026-01-31T12:00:00.0000000010Z"`},
	} {
		if _, err := decodeAuditLine([]byte(strings.TrimSuffix(line, "\n"))); err != nil {
			t.Fatalf("the line as written: %v", err)
		}
		edited := reHash(t, line, c.old, c.new)
		if e, err := decodeAuditLine(edited[:len(edited)-1]); err == nil {
			t.Errorf("%s: accepted as %+v", c.name, e)
		}
		// As the last line it is taken for a torn append; before another
		// line it is INT_002.
		writeFile(t, fs, auditPath, append(append([]byte(nil), edited...), `{"seq":2}`+"\n"...))
		_, err := VerifyAudit(fs, auditPath)
		testutil.WantCode(t, err, errs.CodeChainBroken)
	}
}

// TestAuditAppendRefusesInvalidUTF8: json.Marshal writes a byte that is not
// UTF-8 as \ufffd, which does not re-encode to itself, so the line would be
// refused on reading — taken for a torn append and written over, though
// Append acknowledged it. Append refuses such an entry instead (INPUT_001);
// every string the engine audits is UTF-8 already. Found by FuzzAuditLog
// (testdata/fuzz/FuzzAuditLog/35ea472ef94cf0f9).
func TestAuditAppendRefusesInvalidUTF8(t *testing.T) {
	fs := vfs.NewMem()
	writeAuditLog(t, fs, 1)
	for _, e := range []AuditEntry{
		{Action: "x", Note: "\x84"},
		{Action: "x", Added: []AuditItem{{Kind: "snapshot", Name: "a\xff.snap"}}},
		{Action: "x", Removed: []AuditItem{{Kind: "cut", Anchor: "\xc3"}}},
	} {
		_, err := Append(fs, auditPath, e)
		testutil.WantCode(t, err, errs.CodeInvalidInput)
		head, err := VerifyAudit(fs, auditPath)
		if err != nil || head.Lines != 1 || head.Torn != 0 {
			t.Fatalf("after a refused append: %+v, %v", head, err)
		}
	}
}
