package snapshot

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestAuditScanAllocatesForItsInput: a scan of the audit log (VerifyAudit,
// ReadAudit: verify, compaction, rebuild, open) allocates for what the log
// holds, not a line buffer of the longest line allowed (1 MiB, which held
// FuzzAuditLog to about 900 inputs a second): a three-line, 1.6 KB log
// costs about 20 KB.
func TestAuditScanAllocatesForItsInput(t *testing.T) {
	fs := vfs.NewMem()
	data := writeAuditLog(t, fs, 3)
	const runs = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < runs; i++ {
		head, err := VerifyAudit(fs, auditPath)
		if err != nil || head.Lines != 3 {
			t.Fatalf("%+v %v", head, err)
		}
		for _, err := range ReadAudit(fs, auditPath) {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / (2 * runs)
	// Checking each line allocates too (its JSON, its re-encoding), but not
	// a hasher with an 8 KiB buffer twice a line (28 KB a line).
	if limit := uint64(16*len(data) + 16<<10); per > limit {
		t.Fatalf("a scan of a %d-byte log allocates %d bytes; want at most %d", len(data), per, limit)
	}
	t.Logf("a scan of a %d-byte log allocates %d bytes", len(data), per)
}

// TestAuditScanLineBounds: the scan's buffer grows with the lines it
// meets, and accepts exactly what the 1 MiB reader it replaces accepted: a
// line of up to maxAuditLine+1 bytes with its newline (an append padded
// over a torn tail can be that long), a torn tail of up to maxAuditLine
// bytes; one byte more of either is INT_002 at that line.
func TestAuditScanLineBounds(t *testing.T) {
	fs := vfs.NewMem()
	data := writeAuditLog(t, fs, 2)
	first := data[:bytes.IndexByte(data, '\n')+1]
	second := data[len(first):]
	padded := func(n int) []byte { // the second line padded to n bytes with its newline
		line := bytes.TrimSuffix(second, []byte("\n"))
		return append(append(slices.Clone(line), bytes.Repeat([]byte{' '}, n-len(line)-1)...), '\n')
	}
	cases := []struct {
		name  string
		data  []byte
		lines uint64
		torn  int64
		err   bool
	}{
		{"line of maxAuditLine+1 bytes", append(slices.Clone(first), padded(maxAuditLine+1)...), 2, 0, false},
		{"line of maxAuditLine+2 bytes", append(slices.Clone(first), padded(maxAuditLine+2)...), 1, 0, true},
		{"tail of maxAuditLine bytes", append(slices.Clone(data), bytes.Repeat([]byte{'{'}, maxAuditLine)...), 2, maxAuditLine, false},
		{"tail of maxAuditLine+1 bytes", append(slices.Clone(data), bytes.Repeat([]byte{'{'}, maxAuditLine+1)...), 2, 0, true},
		{"line over the first buffer", append(slices.Clone(first), padded(5000)...), 2, 0, false},
	}
	for _, c := range cases {
		writeFile(t, fs, auditPath, c.data)
		head, err := VerifyAudit(fs, auditPath)
		if c.err {
			e := testutil.WantCode(t, err, errs.CodeChainBroken)
			if e.Seq != c.lines+1 || !strings.Contains(e.Message, "longer than") {
				t.Fatalf("%s: %v; want INT_002 at line %d, too long", c.name, err, c.lines+1)
			}
		} else if err != nil || head.Lines != c.lines || head.Torn != c.torn {
			t.Fatalf("%s: %+v %v; want %d lines, %d torn bytes", c.name, head, err, c.lines, c.torn)
		}
	}
}

// TestLineReader: lines come back whole whatever the buffer's first size
// and however the reader cuts its reads; the tail comes back with io.EOF,
// a read error with its error, and a reader that returns nothing forever
// ends with io.ErrNoProgress instead of a spin.
func TestLineReader(t *testing.T) {
	in := "a\nbb\n\nccccccccccccccccccccccccccccccccccccccccc\ndd"
	for _, size := range []int{1, 16, 17, 64, 1000} {
		lr := newLineReader(iotest.OneByteReader(strings.NewReader(in)), size, 64)
		var got []string
		for {
			line, err := lr.next()
			got = append(got, string(line))
			if err != nil {
				if err != io.EOF {
					t.Fatalf("size %d: %v", size, err)
				}
				break
			}
		}
		if strings.Join(got, "") != in || len(got) != 5 || got[4] != "dd" {
			t.Fatalf("size %d: lines %q", size, got)
		}
	}
	lr := newLineReader(strings.NewReader("0123456789\n"), 4, 8)
	if _, err := lr.next(); !errors.Is(err, errLineTooLong) {
		t.Fatalf("a line over the bound: %v", err)
	}
	boom := errors.New("boom")
	lr = newLineReader(io.MultiReader(strings.NewReader("x\ny"), iotest.ErrReader(boom)), 16, 64)
	if line, err := lr.next(); err != nil || string(line) != "x\n" {
		t.Fatalf("%q %v", line, err)
	}
	if end, err := lr.atEnd(); end || err != nil {
		t.Fatalf("atEnd before the tail: %v %v", end, err)
	}
	if line, err := lr.next(); !errors.Is(err, boom) || string(line) != "y" {
		t.Fatalf("tail before a read error: %q %v", line, err)
	}
	if end, err := lr.atEnd(); end || !errors.Is(err, boom) {
		t.Fatalf("a read error taken for the end (%v), or not returned: %v", end, err)
	}
	lr = newLineReader(emptyReader{}, 16, 64)
	if _, err := lr.next(); !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("a reader that returns nothing: %v", err)
	}
}

type emptyReader struct{}

func (emptyReader) Read([]byte) (int, error) { return 0, nil }
