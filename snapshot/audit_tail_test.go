package snapshot

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestAuditBadLastLineBeforeATornTail: a last whole line that fails its
// hash, with bytes after its newline, is no shape a crash leaves (an
// append ends with its newline and writes over whatever torn bytes it
// found, padding to cover them). VerifyAudit refused it (INT_002 at that
// line) but Append took the line for a torn append and wrote over it and
// the tail, which silently repaired the tampering. Both refuse it now,
// with the same typed error at the same line, and Append writes nothing.
// A crash's shapes stay tolerated: a bad last line alone, a torn tail
// alone.
func TestAuditBadLastLineBeforeATornTail(t *testing.T) {
	fs := vfs.NewMem()
	data := writeAuditLog(t, fs, 3)
	lines := strings.SplitAfter(string(data), "\n")[:3]
	bad := strings.Replace(lines[2], `"segno":3`, `"segno":7`, 1) // its hash no longer holds
	badOff := int64(len(lines[0]) + len(lines[1]))
	for _, tail := range []string{"x", `{"seq":4,"ti`, "   ", strings.Repeat("{", 5000)} {
		tampered := []byte(lines[0] + lines[1] + bad + tail)
		writeFile(t, fs, auditPath, tampered)
		_, verr := VerifyAudit(fs, auditPath)
		ve := wantCode(t, verr, errs.CodeChainBroken)
		if ve.Seq != 3 || ve.Offset != badOff {
			t.Fatalf("tail %q: VerifyAudit at line %d offset %d, want line 3 offset %d: %v", tail[:1], ve.Seq, ve.Offset, badOff, verr)
		}
		_, aerr := Append(fs, auditPath, AuditEntry{Action: "x", Time: testCreated})
		var ae *errs.Error
		if !errors.As(aerr, &ae) || ae.Code != errs.CodeChainBroken || ae.Seq != ve.Seq || ae.Offset != ve.Offset || ae.File != auditPath {
			t.Fatalf("tail %q: Append after a bad last line and a torn tail: %v; want INT_002 at line 3 offset %d as VerifyAudit says (%v)",
				tail[:1], aerr, badOff, verr)
		}
		if got := readFile(t, fs, auditPath); !bytes.Equal(got, tampered) {
			t.Fatalf("tail %q: the refused Append changed the file", tail[:1])
		}
	}
	// What a crash leaves stays a torn tail that Append writes over.
	for name, shape := range map[string]string{
		"bad last line":          lines[0] + lines[1] + bad,
		"torn tail":              lines[0] + lines[1] + lines[2] + `{"seq":4,"ti`,
		"bad line, newline lost": lines[0] + lines[1] + strings.TrimSuffix(bad, "\n"),
	} {
		writeFile(t, fs, auditPath, []byte(shape))
		head, err := VerifyAudit(fs, auditPath)
		if err != nil || head.Torn == 0 {
			t.Fatalf("%s: VerifyAudit %+v %v; want a torn tail", name, head, err)
		}
		e, err := Append(fs, auditPath, AuditEntry{Action: "x", Time: testCreated})
		if err != nil || e.Seq != head.Lines+1 || e.Prev != head.Head {
			t.Fatalf("%s: Append %+v %v; want line %d after %s", name, e, err, head.Lines+1, head.Head)
		}
		if after, err := VerifyAudit(fs, auditPath); err != nil || after.Lines != head.Lines+1 || after.Torn != 0 {
			t.Fatalf("%s: after Append %+v %v", name, after, err)
		}
	}
}
