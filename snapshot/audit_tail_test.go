package snapshot

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
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
		ve := testutil.WantCode(t, verr, errs.CodeChainBroken)
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

// TestAuditAppendAfterALastLineThatDoesNotLink: a last line that checks on
// its own (its hash holds) but does not link — its seq is not one past the
// line before, or its prev is not that line's hash — is refused by
// VerifyAudit (INT_002 at that line). Append checked only the line's own
// hash and chained onto it, so the next line made a log whose damage was
// one line deeper, and a lost or repeated line got a successor. Append now
// refuses it with VerifyAudit's error (same line, same offset) and writes
// nothing, with or without a torn tail after it, and so for the line it
// falls back to when the last one is a torn append.
func TestAuditAppendAfterALastLineThatDoesNotLink(t *testing.T) {
	fs := vfs.NewMem()
	data := writeAuditLog(t, fs, 3)
	l := strings.SplitAfter(string(data), "\n")[:3]
	zero := segment.Hash{}.String()
	prev3 := l[2][strings.Index(l[2], `"prev":"`)+len(`"prev":"`):]
	prev3 = prev3[:strings.IndexByte(prev3, '"')]
	torn := strings.Replace(l[2], `"segno":3`, `"segno":7`, 1) // fails its hash: a torn append when last
	cases := []struct {
		name string
		log  string
		line uint64
		off  int
		msg  string
	}{
		{"seq one too far", l[0] + l[1] + string(reHash(t, l[2], `{"seq":3,`, `{"seq":4,`)), 3, len(l[0] + l[1]), "carries seq 4"},
		{"seq repeated", l[0] + l[1] + string(reHash(t, l[2], `{"seq":3,`, `{"seq":2,`)), 3, len(l[0] + l[1]), "carries seq 2"},
		{"prev elsewhere", l[0] + l[1] + string(reHash(t, l[2], prev3, zero)), 3, len(l[0] + l[1]), "does not link"},
		{"line repeated", l[0] + l[1] + l[1], 3, len(l[0] + l[1]), "carries seq 2"},
		{"line before it lost", l[0] + l[2], 2, len(l[0]), "carries seq 3"},
		{"only line not the first", l[1], 1, 0, "carries seq 2"},
		{"first line's prev not zero", string(reHash(t, l[0], `"prev":"`+zero, `"prev":"`+prev3)), 1, 0, "does not link"},
		{"line repeated, torn tail", l[0] + l[1] + l[1] + `{"seq":4,"ti`, 3, len(l[0] + l[1]), "carries seq 2"},
		{"line lost before a torn append", l[0] + l[2] + torn, 2, len(l[0]), "carries seq 3"},
		{"line before a torn append altered", l[0] + strings.Replace(l[1], `"segno":2`, `"segno":7`, 1) + torn, 2, len(l[0]), "altered"},
		{"line before the last altered", l[0] + strings.Replace(l[1], `"segno":2`, `"segno":7`, 1) + l[2], 2, len(l[0]), "altered"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			writeFile(t, fs, auditPath, []byte(c.log))
			ve := auditError(t, fs)
			if ve.Seq != c.line || ve.Offset != int64(c.off) || !strings.Contains(ve.Message, c.msg) {
				t.Fatalf("VerifyAudit: %v; want line %d offset %d mentioning %q", ve, c.line, c.off, c.msg)
			}
			_, aerr := Append(fs, auditPath, AuditEntry{Action: "x", Time: testCreated})
			var ae *errs.Error
			if !errors.As(aerr, &ae) || ae.Code != errs.CodeChainBroken || ae.Seq != ve.Seq || ae.Offset != ve.Offset || ae.File != auditPath {
				t.Fatalf("Append: %v; want INT_002 at line %d offset %d as VerifyAudit says (%v)", aerr, c.line, c.off, ve)
			}
			if !strings.Contains(ae.Message, c.msg) {
				t.Fatalf("Append: %q does not say %q", ae.Message, c.msg)
			}
			if got := readFile(t, fs, auditPath); string(got) != c.log {
				t.Fatalf("the refused Append changed the file")
			}
		})
	}
}
