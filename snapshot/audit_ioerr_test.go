package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// failNthAuditRead is an injector that fails the n-th read operation
// (stat, open, read) on the audit log, and records whether it did.
type failNthAuditRead struct {
	n, seen int
	fired   *errorfs.Op
}

func (f *failNthAuditRead) MaybeError(op errorfs.Op) error {
	if op.Path != auditPath || op.Kind.ReadOrWrite() != errorfs.OpIsRead {
		return nil
	}
	f.seen++
	if f.seen-1 != f.n {
		return nil
	}
	f.fired = &op
	return errorfs.ErrInjected
}

func (f *failNthAuditRead) String() string { return fmt.Sprintf("fail audit read %d", f.n) }

// TestAuditReadErrors fails, one at a time, every read VerifyAudit,
// ReadAudit and Append make of the audit log (its stat, open and each
// read), on logs of the shapes their readers tell apart: sound, with a
// torn tail, with a torn last line (whose end the scan must see before it
// calls the line torn), with a damaged line, and long enough for several
// reads. A failed read says nothing about what the log holds: the result
// is the one without the failure or an IO_001 that wraps the failure —
// never INT_002, which verify, compaction and the CLI report as damage
// (scanAudit coded a failed open or read INT_002). A refused Append
// writes nothing.
func TestAuditReadErrors(t *testing.T) {
	mem := vfs.NewMem()
	data := writeAuditLog(t, mem, 3)
	lines := strings.SplitAfter(string(data), "\n")[:3]
	long := writeAuditLog(t, vfs.NewMem(), 40) // ~20 KB: several reads each way
	shapes := map[string]string{
		"sound":           string(data),
		"torn tail":       string(data) + `{"seq":4,"ti`,
		"torn last line":  lines[0] + lines[1] + strings.Replace(lines[2], `"segno":3`, `"segno":7`, 1),
		"damaged line":    lines[0] + strings.Replace(lines[1], `"segno":2`, `"segno":7`, 1) + lines[2],
		"long":            string(long),
		"long, torn tail": string(long) + strings.Repeat("{", 5000),
	}
	errText := func(err error) string {
		if err == nil {
			return ""
		}
		return err.Error()
	}
	for name, shape := range shapes {
		t.Run(name, func(t *testing.T) {
			// What each gives without a failure.
			writeFile(t, mem, auditPath, []byte(shape))
			wantHead, wantErr := VerifyAudit(mem, auditPath)
			var wantRead []AuditEntry
			var wantReadErr error
			for e, err := range ReadAudit(mem, auditPath) {
				if err != nil {
					wantReadErr = err
					break
				}
				wantRead = append(wantRead, e)
			}
			_, wantAppendErr := Append(mem, auditPath, AuditEntry{Action: "x", Time: testCreated})
			wantAppended := readFile(t, mem, auditPath)

			// check: with a read failing, the result is the one without
			// the failure, or IO_001 wrapping the failure.
			check := func(what string, inj *failNthAuditRead, err error, same bool) {
				t.Helper()
				if inj.fired == nil || same {
					return
				}
				op := fmt.Sprintf("%s with read %d (%v) failing", what, inj.n, inj.fired.Kind)
				if err == nil {
					t.Errorf("%s: no error, and a result other than without the failure", op)
				} else if errs.CodeOf(err) != errs.CodeWriteFailed || errs.IsCorruption(err) || !errors.Is(err, errorfs.ErrInjected) {
					t.Errorf("%s: %v; want IO_001 wrapping the failure (a failed read is no integrity finding), or what it gives without the failure", op, err)
				}
			}
			for i := 0; ; i++ {
				if i == 1000 {
					t.Fatal("still reading the audit log after 1000 operations")
				}
				writeFile(t, mem, auditPath, []byte(shape))
				inj := &failNthAuditRead{n: i}
				head, err := VerifyAudit(errorfs.Wrap(mem, inj), auditPath)
				check("VerifyAudit", inj, err, head == wantHead && errText(err) == errText(wantErr))
				fired := inj.fired != nil

				inj = &failNthAuditRead{n: i}
				var got []AuditEntry
				var rerr error
				for e, err := range ReadAudit(errorfs.Wrap(mem, inj), auditPath) {
					if err != nil {
						rerr = err
						break
					}
					got = append(got, e)
				}
				same := len(got) == len(wantRead) && errText(rerr) == errText(wantReadErr)
				for j := 0; same && j < len(got); j++ {
					same = got[j].Hash == wantRead[j].Hash
				}
				check("ReadAudit", inj, rerr, same)
				fired = fired || inj.fired != nil

				inj = &failNthAuditRead{n: i}
				_, aerr := Append(errorfs.Wrap(mem, inj), auditPath, AuditEntry{Action: "x", Time: testCreated})
				after := readFile(t, mem, auditPath)
				check("Append", inj, aerr, errText(aerr) == errText(wantAppendErr) && bytes.Equal(after, wantAppended))
				if aerr != nil && !bytes.Equal(after, []byte(shape)) {
					t.Errorf("Append with read %d failing refused (%v) but changed the file", i, aerr)
				}
				if !fired && inj.fired == nil {
					break
				}
			}
		})
	}
}
