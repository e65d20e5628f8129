package snapshot

import (
	"strings"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
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
		wantCode(t, err, errs.CodeChainBroken)
	}
}
