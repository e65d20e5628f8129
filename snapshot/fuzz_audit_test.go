package snapshot

// FuzzAuditLog lives here, not in fuzz/, because its round-trip property
// needs the audit line's own encoder (encodeAuditLine) and decoder: exporting
// them for a test would add to the package's API a second way to write a
// line that skips Append's chaining.

import (
	"bytes"
	"errors"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/zeebo/blake3"
)

// fuzzAuditMax bounds the file a fuzz input makes: far below maxAuditLine,
// so a line is never too long and the scan's bufio buffer never fills.
const fuzzAuditMax = 64 << 10

var fuzzActions = []string{"create_snapshot", "delete_snapshot", "record_cut", "remove_segment"}

// fuzzAuditEntry makes the i-th (0-based) valid line's entry from chunk.
func fuzzAuditEntry(i int, chunk []byte) AuditEntry {
	e := AuditEntry{Seq: uint64(i + 1), Time: testCreated.Add(time.Duration(i) * time.Second), PolicyRef: specPolicyRef}
	if len(chunk) > 0 {
		e.Action = fuzzActions[int(chunk[0])%len(fuzzActions)]
		chunk = chunk[1:]
		if e.Action == "create_snapshot" {
			e.Added = []AuditItem{{Kind: "snapshot", Name: "snapshot-" + string(chunk) + ".snap", Bytes: int64(len(chunk)), StateHash: hashOf("s"), Hash: hashOf(string(chunk))}}
		}
	}
	e.Note = string(chunk)
	return e
}

// hashedLine ends body with the line hash its bytes have, and a newline.
func hashedLine(body []byte) ([]byte, segment.Hash) {
	var h segment.Hash
	blake3.DeriveKey(ContextAuditLine, body, h[:])
	line := append(bytes.Clone(body), `,"hash":"`...)
	line = append(line, h.String()...)
	return append(line, '"', '}', '\n'), h
}

// FuzzAuditLog: verify, compaction and rebuild read the audit log, which
// anyone who can write the database directory can edit. On any file bytes:
// never panic or hang; every line decodeAuditLine accepts is the canonical
// encoding of what it decodes to, and its hash is the line-hash of its
// bytes; ReadAudit and VerifyAudit accept exactly the leading lines that
// decode and link (seq = line number, prev = the hash before), report the
// first that does not as INT_002 at its line number and offset — unless it
// is the last line, does not decode and nothing follows it, which is a torn
// append — and count what follows the last newline as torn; and Append
// after a log that verifies chains its line to the head and leaves a log
// that verifies one line longer (after one that does not, it refuses with
// INT_002 and changes nothing, or appends; when the chain breaks at the
// line it chains onto — the last whole line, or the one before a torn
// append — or at an undecodable line before that one, it refuses as
// VerifyAudit does, at that line).
//
// The first byte picks the mode. 0: the rest is the file. 1: the next byte
// (mod 8) is a count n of valid chained lines to write first, each made
// from a chunk (a length byte L, then L bytes); what is left is appended
// raw. 2: as 1, but what is left is split at newlines and each piece is
// given the line hash of its bytes, with "PREV" replaced by the previous
// line's hash: the fuzzer's JSON gets past the hash check and can link.
func FuzzAuditLog(f *testing.F) {
	var valid []byte
	var prev segment.Hash
	for i, c := range []string{"\x00a", "\x01", "\x02cut below 7"} {
		e := fuzzAuditEntry(i, []byte(c))
		e.Prev = prev
		line, err := encodeAuditLine(&e)
		if err != nil {
			f.Fatal(err)
		}
		valid = append(append(valid, line...), '\n')
		prev = e.Hash
	}
	f.Add(append([]byte{0}, valid...))
	f.Add(append(append([]byte{0}, valid...), `{"seq":4,"ti`...))
	f.Add(append(append([]byte{0}, valid...), "   \n"...))
	// The last line altered, a torn tail after it: Append wrote over both.
	f.Add(append(append([]byte{0}, bytes.Replace(valid, []byte("cut below 7"), []byte("cut below 8"), 1)...), `{"seq":4`...))
	// The last line repeated, which checks but does not link: Append chained
	// onto it.
	f.Add(append(append([]byte{0}, valid...), valid[bytes.LastIndexByte(valid[:len(valid)-1], '\n')+1:]...))
	f.Add(append([]byte{0}, bytes.Replace(valid, []byte(`"seq":2`), []byte(`"seq":3`), 1)...))
	f.Add([]byte("\x01\x02\x02\x00x\x01\x03" + `{"seq":3}` + "\n"))
	f.Add([]byte("\x01\x01\x00" + `{"seq":2}` + "\n\n"))
	f.Add([]byte("\x02\x01\x00" + `{"seq":2,"time":"2026-01-31T12:00:00Z","policy_ref":"","action":"record_cut","removed":[],"added":[{"kind":"cut","anchor":"a","last_seq":7,"hash":"PREV"}],"prev":"PREV"`))
	f.Add([]byte("\x02\x00" + `{"seq":1,"time":"2026-01-31T12:00:00Z","policy_ref":"","action":"x","removed":[],"added":[],"ACTION":"y","prev":"PREV"` + "\n" +
		`{"seq":2,"time":"0001-01-01T00:00:00Z","policy_ref":"","action":"","removed":[],"added":[],"prev":"PREV"`))
	f.Add([]byte("\x02\x00" + `{"seq":1,"time":"2026-01-31T13:00:00+01:00","policy_ref":"","action":"x","removed":null,"added":[],"prev":"PREV"`))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 || len(in) > fuzzAuditMax {
			return
		}
		data, nValid := fuzzAuditFile(t, in)

		// The reference: lines, each decoded and checked on its own.
		type refLine struct {
			off   int64
			raw   []byte // without its newline
			e     AuditEntry
			err   error
			links bool
		}
		var lines []refLine
		var prevHash segment.Hash
		off := int64(0)
		rest := data
		for {
			i := bytes.IndexByte(rest, '\n')
			if i < 0 {
				break
			}
			l := refLine{off: off, raw: rest[:i]}
			l.e, l.err = decodeAuditLine(l.raw)
			if l.err == nil {
				trimmed := bytes.TrimRight(l.raw, " ")
				re := l.e
				canon, err := encodeAuditLine(&re)
				if err != nil || !bytes.Equal(canon, trimmed) {
					t.Fatalf("line %d accepted but encodes as\n%s\nnot\n%s (%v)", len(lines)+1, canon, trimmed, err)
				}
				var h segment.Hash
				blake3.DeriveKey(ContextAuditLine, trimmed[:len(trimmed)-hashSuffixLen], h[:])
				if h != l.e.Hash {
					t.Fatalf("line %d accepted with hash %s; its bytes hash to %s", len(lines)+1, l.e.Hash, h)
				}
				l.links = l.e.Seq == uint64(len(lines)+1) && l.e.Prev == prevHash
				prevHash = l.e.Hash
			}
			lines = append(lines, l)
			off += int64(i + 1)
			rest = rest[i+1:]
		}
		k := 0 // leading lines that decode and link
		var head segment.Hash
		for k < len(lines) && lines[k].err == nil && lines[k].links {
			head = lines[k].e.Hash
			k++
		}
		if k < nValid {
			t.Fatalf("only %d of the %d valid lines written first check", k, nValid)
		}
		wantTorn, wantErr := int64(len(rest)), false
		if k < len(lines) {
			if lines[k].err != nil && k == len(lines)-1 && len(rest) == 0 {
				wantTorn = int64(len(lines[k].raw) + 1)
			} else {
				wantErr = true
			}
		}

		fs := vfs.NewMem()
		if err := fs.MkdirAll("db", 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, fs, auditPath, data)
		got, err := VerifyAudit(fs, auditPath)
		if got.Lines != uint64(k) || got.Head != head {
			t.Fatalf("VerifyAudit head %+v (%v); %d lines check, the last hashing to %s", got, err, k, head)
		}
		if wantErr {
			var ae *errs.Error
			if !errors.As(err, &ae) || ae.Code != errs.CodeChainBroken || ae.Seq != uint64(k+1) || ae.Offset != lines[k].off {
				t.Fatalf("line %d at offset %d does not check (%v), yet VerifyAudit says %v", k+1, lines[k].off, lines[k].err, err)
			}
		} else if err != nil || got.Torn != wantTorn {
			t.Fatalf("VerifyAudit %+v, %v; want %d lines and %d torn bytes", got, err, k, wantTorn)
		}

		n := 0
		for e, rerr := range ReadAudit(fs, auditPath) {
			if rerr != nil {
				if !wantErr || n != k || errs.CodeOf(rerr) != errs.CodeChainBroken {
					t.Fatalf("ReadAudit fails after %d entries with %v", n, rerr)
				}
				n = -1
				break
			}
			if n >= k || e.Hash != lines[n].e.Hash {
				t.Fatalf("ReadAudit entry %d is %+v", n+1, e)
			}
			n++
		}
		if n >= 0 && (wantErr || n != k) {
			t.Fatalf("ReadAudit read %d entries and no error; %d check, error expected %v", n, k, wantErr)
		}

		e, err := Append(fs, auditPath, AuditEntry{Action: "fuzz", Time: testCreated})
		if wantErr {
			if err != nil && errs.CodeOf(err) != errs.CodeChainBroken {
				t.Fatalf("Append after a broken log: %v", err)
			}
			if err != nil && !bytes.Equal(readFile(t, fs, auditPath), data) {
				t.Fatalf("Append refused (%v) but changed the file", err)
			}
			// The line Append chains onto is the last whole one, or the
			// one before it when the last is a torn append (it does not
			// decode and nothing follows it). When the chain breaks
			// there — it does not decode (with a torn tail after it,
			// which no crash leaves) or does not link — or at the line
			// before it, which does not decode, Append refuses as
			// VerifyAudit does, at the same line.
			target := len(lines) - 1
			if lines[target].err != nil && len(rest) == 0 {
				target--
			}
			if k == target || (k == target-1 && lines[k].err != nil && lines[target].err == nil) {
				var ae *errs.Error
				if !errors.As(err, &ae) || ae.Code != errs.CodeChainBroken || ae.Seq != uint64(k+1) || ae.Offset != lines[k].off {
					t.Fatalf("Append onto line %d of %d (%d torn bytes after) with line %d (offset %d) failing (decode: %v, links: %v): %v; want INT_002 there",
						target+1, len(lines), len(rest), k+1, lines[k].off, lines[k].err, lines[k].links, err)
				}
			}
			return
		}
		if err != nil || e.Seq != uint64(k+1) || e.Prev != head {
			t.Fatalf("Append after a log of %d good lines: %+v, %v", k, e, err)
		}
		after, err := VerifyAudit(fs, auditPath)
		if err != nil || after.Lines != uint64(k+1) || after.Head != e.Hash || after.Torn != 0 {
			t.Fatalf("after Append: %+v, %v", after, err)
		}
	})
}

// fuzzAuditFile builds the audit file a FuzzAuditLog input describes and
// returns it with the number of valid lines it starts with.
func fuzzAuditFile(t *testing.T, in []byte) ([]byte, int) {
	mode, rest := in[0]%3, in[1:]
	if mode == 0 || len(rest) == 0 {
		return rest, 0
	}
	n := int(rest[0]) % 8
	rest = rest[1:]
	var data []byte
	var prev segment.Hash
	for i := 0; i < n; i++ {
		var chunk []byte
		if len(rest) > 0 {
			l := min(int(rest[0]), len(rest)-1)
			chunk, rest = rest[1:1+l], rest[1+l:]
		}
		e := fuzzAuditEntry(i, chunk)
		e.Prev = prev
		line, err := encodeAuditLine(&e)
		if err != nil {
			// Only a string that is not UTF-8 is refused, as INPUT_001:
			// Marshal would write it as \ufffd, which does not re-encode
			// to itself.
			if errs.CodeOf(err) != errs.CodeInvalidInput || utf8.Valid(chunk[1:]) {
				t.Fatalf("encode entry %+v: %v", e, err)
			}
			e = fuzzAuditEntry(i, append([]byte{chunk[0]}, bytes.ToValidUTF8(chunk[1:], []byte("\uFFFD"))...))
			e.Prev = prev
			if line, err = encodeAuditLine(&e); err != nil {
				t.Fatalf("encode entry %+v: %v", e, err)
			}
		}
		data = append(append(data, line...), '\n')
		prev = e.Hash
	}
	if mode == 1 {
		return append(data, rest...), n
	}
	for _, piece := range bytes.Split(rest, []byte{'\n'}) {
		var line []byte
		line, prev = hashedLine(bytes.ReplaceAll(piece, []byte("PREV"), []byte(prev.String())))
		data = append(data, line...)
	}
	return data, n
}
