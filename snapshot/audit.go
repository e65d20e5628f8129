package snapshot

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/zeebo/blake3"
)

// AuditFileName is the audit log's file name in the database directory.
const AuditFileName = "audit.log"

// maxAuditLine bounds one audit line.
const maxAuditLine = 1 << 20

// AuditItem is one thing an action removed or added, with its hash.
//
//	kind "snapshot":   Name, Bytes, Hash = file hash, StateHash
//	kind "segment":    Anchor, Segno, FirstSeq, LastSeq, Bytes, Hash = hash of its last record
//	kind "cut":        Anchor, LastSeq = the cut seq, Hash = head hash at the cut
//	kind "checkpoint": Name, Bytes, Hash = CheckpointFileHash of the note file
type AuditItem struct {
	Kind      string       `json:"kind"`
	Name      string       `json:"name,omitempty"`
	Anchor    string       `json:"anchor,omitempty"`
	Segno     uint64       `json:"segno,omitempty"`
	FirstSeq  uint64       `json:"first_seq,omitempty"`
	LastSeq   uint64       `json:"last_seq,omitempty"`
	Bytes     int64        `json:"bytes,omitempty"`
	StateHash segment.Hash `json:"state_hash,omitzero"`
	Hash      segment.Hash `json:"hash"`
}

// AuditEntry is one line of the audit log. Append sets Seq, Prev and Hash.
type AuditEntry struct {
	Seq       uint64       `json:"seq"`
	Time      time.Time    `json:"time"`
	PolicyRef string       `json:"policy_ref"`
	Action    string       `json:"action"`
	Removed   []AuditItem  `json:"removed"`
	Added     []AuditItem  `json:"added"`
	Note      string       `json:"note,omitempty"`
	Prev      segment.Hash `json:"prev"`
	Hash      segment.Hash `json:"hash"`
}

// auditBody is AuditEntry without its hash: the hashed part of a line.
type auditBody struct {
	Seq       uint64       `json:"seq"`
	Time      time.Time    `json:"time"`
	PolicyRef string       `json:"policy_ref"`
	Action    string       `json:"action"`
	Removed   []AuditItem  `json:"removed"`
	Added     []AuditItem  `json:"added"`
	Note      string       `json:"note,omitempty"`
	Prev      segment.Hash `json:"prev"`
}

// AuditEntry turns a plan action into the audit entry recording it. For
// create_snapshot, add SnapshotItem of the new snapshot to Added.
func (a Action) AuditEntry(now time.Time, policyRef string) AuditEntry {
	e := AuditEntry{Time: now, PolicyRef: policyRef, Action: string(a.Kind), Note: a.Reason}
	switch a.Kind {
	case ActionDeleteSnapshot:
		e.Removed = []AuditItem{{Kind: "snapshot", Name: a.Snapshot, Bytes: a.Bytes, Hash: a.Hash}}
	case ActionRecordCut:
		e.Added = []AuditItem{{Kind: "cut", Anchor: a.Anchor, LastSeq: a.CutSeq, Hash: a.Hash}}
	case ActionRemoveSegment:
		e.Removed = []AuditItem{{Kind: "segment", Anchor: a.Anchor, Segno: a.Segno, FirstSeq: a.FirstSeq, LastSeq: a.LastSeq, Bytes: a.Bytes, Hash: a.Hash}}
	}
	return e
}

// SnapshotItem describes a snapshot for the audit log.
func SnapshotItem(i Info) AuditItem {
	return AuditItem{Kind: "snapshot", Name: i.Name, Bytes: i.Size, StateHash: i.StateHash, Hash: i.FileHash}
}

// AuditCreateCheckpoint is the action of the line the engine appends when it
// stores a checkpoint it signed: one item of kind AuditKindCheckpoint.
// Compaction holds no key, so this line is what tells the database's own
// checkpoints, which may bound a cut, from any other file in checkpoints/.
const AuditCreateCheckpoint = "create_checkpoint"

// AuditKindCheckpoint is the item kind of a stored checkpoint.
const AuditKindCheckpoint = "checkpoint"

// CheckpointItem describes a stored checkpoint, file name and signed note
// as stored, for the audit log.
func CheckpointItem(name string, note []byte) AuditItem {
	return AuditItem{Kind: AuditKindCheckpoint, Name: name, Bytes: int64(len(note)), Hash: CheckpointFileHash(note)}
}

// AuditRetireSnapshot is the action of the line an operator's retirement of
// a snapshot that fails its checks appends (engine.DB.RetireSnapshot): one
// removed item of kind "snapshot", its note naming the finding and where
// the file went (lost+found/). The log then no longer vouches for the
// snapshot, as after delete_snapshot.
const AuditRetireSnapshot = "retire_snapshot"

// PresentFileHash is the file hash of the snapshot at path as its bytes
// are now — derive-key(ContextFile) over every byte but the last 32 — for
// the audit line retiring a file too damaged to say it itself. A file
// shorter than 32 bytes hashes as a whole.
func PresentFileHash(fs vfs.FS, path string) (segment.Hash, int64, error) {
	f, err := fs.Open(path)
	if err != nil {
		return segment.Hash{}, 0, errs.Wrap(errs.CodeWriteFailed, err, "open %s", path)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return segment.Hash{}, 0, errs.Wrap(errs.CodeWriteFailed, err, "stat %s", path)
	}
	n := st.Size()
	body := n - segment.HashSize
	if body < 0 {
		body = n
	}
	h := blake3.NewDeriveKey(ContextFile)
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, body)); err != nil {
		return segment.Hash{}, 0, errs.Wrap(errs.CodeWriteFailed, err, "read %s", path)
	}
	var out segment.Hash
	copy(out[:], h.Sum(nil))
	return out, n, nil
}

// CheckpointFileHash is the hash the audit log records of a stored
// checkpoint file: plain BLAKE3-256 of its bytes, so that anyone can check
// a note against the log with b3sum. A note is text that starts with its
// origin line, so no such input is a Merkle leaf or node input (0x00 or
// 0x01 first) or the empty string.
func CheckpointFileHash(note []byte) segment.Hash {
	return segment.Hash(blake3.Sum256(note))
}

// AuditHead is the state of an audit log after its last line.
type AuditHead struct {
	Lines uint64       `json:"lines"`
	Head  segment.Hash `json:"head"`       // hash of the last line; zero when empty
	Torn  int64        `json:"torn_bytes"` // bytes after the last newline
}

// encodeAuditLine fills e.Hash and returns the line without its newline.
func encodeAuditLine(e *AuditEntry) ([]byte, error) {
	// NB: json.Marshal writes a byte that is not UTF-8 as \ufffd, which
	// decodes to U+FFFD, which Marshal writes raw: such a line does not
	// re-encode to itself, and decodeAuditLine refuses it.
	if s, ok := invalidUTF8(e); !ok {
		return nil, errs.New(errs.CodeInvalidInput, "audit: entry field %q is not valid UTF-8", s)
	}
	b := auditBody{Seq: e.Seq, Time: e.Time, PolicyRef: e.PolicyRef, Action: e.Action,
		Removed: e.Removed, Added: e.Added, Note: e.Note, Prev: e.Prev}
	if b.Removed == nil {
		b.Removed = []AuditItem{}
	}
	if b.Added == nil {
		b.Added = []AuditItem{}
	}
	body, err := json.Marshal(b)
	if err != nil {
		return nil, errs.Wrap(errs.CodeInvalidInput, err, "audit: encode entry")
	}
	body = body[:len(body)-1] // drop '}'
	e.Hash = auditLineHash(body)
	line := append(body, `,"hash":"`...)
	line = append(line, e.Hash.String()...)
	return append(line, '"', '}'), nil
}

// invalidUTF8 returns the first string of e that is not valid UTF-8, and
// false; or true when all are.
func invalidUTF8(e *AuditEntry) (string, bool) {
	strs := []string{e.PolicyRef, e.Action, e.Note}
	for _, items := range [][]AuditItem{e.Removed, e.Added} {
		for _, it := range items {
			strs = append(strs, it.Kind, it.Name, it.Anchor)
		}
	}
	for _, s := range strs {
		if !utf8.ValidString(s) {
			return s, false
		}
	}
	return "", true
}

// hashSuffixLen is len(`,"hash":"blake3:<64 hex>"}`).
const hashSuffixLen = len(`,"hash":"`) + len("blake3:") + 2*hashSize + len(`"}`)

// auditLineBase is the derive-key hasher of ContextAuditLine, never written
// to: auditLineHash clones it.
var auditLineBase = blake3.NewDeriveKey(ContextAuditLine)

// auditLineHashers keeps auditLineBase's clones for reuse.
var auditLineHashers = sync.Pool{New: func() any { return auditLineBase.Clone() }}

// auditLineHash is the line hash of body (DK over it, FORMAT.md §9).
//
// NB: blake3.DeriveKey hashes the context again and allocates a Hasher
// with its 8 KiB buffer at every call, and a line read is hashed twice (its
// check and its re-encoding): about 28 KB a line, most of what a scan of
// the audit log would allocate. Reset keeps the derive-key mode and key, so
// a pooled hasher is a fresh one.
func auditLineHash(body []byte) segment.Hash {
	h := auditLineHashers.Get().(*blake3.Hasher)
	_, _ = h.Write(body)
	var out segment.Hash
	h.Sum(out[:0])
	h.Reset()
	auditLineHashers.Put(h)
	return out
}

// decodeAuditLine checks one line (without newline) and decodes it.
func decodeAuditLine(line []byte) (AuditEntry, error) {
	var e AuditEntry
	line = bytes.TrimRight(line, " ")
	if len(line) < hashSuffixLen+1 || !bytes.HasPrefix(line[len(line)-hashSuffixLen:], []byte(`,"hash":"`)) ||
		!bytes.HasSuffix(line, []byte(`"}`)) {
		return e, errors.New("not an audit line (it must end with the line hash)")
	}
	body := line[:len(line)-hashSuffixLen]
	stored, err := segment.ParseHash(string(line[len(line)-hashSuffixLen+len(`,"hash":"`) : len(line)-2]))
	if err != nil {
		return e, err
	}
	want := auditLineHash(body)
	if want != stored {
		return e, fmt.Errorf("line hash %s does not match its content (%s): the line was altered", stored, want)
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return e, fmt.Errorf("decode: %v", err)
	}
	if e.Hash != stored {
		return e, errors.New("line carries two hashes")
	}
	// NB: the hash binds the bytes, not one reading of them. Go's decoder
	// matches field names in any case and lets a repeated field win, so a
	// line could say one action to a case-sensitive reader and another to
	// the engine. Every entry has one encoding (FORMAT.md §9, "Line
	// layout"), and a line in any other is not one the database wrote.
	if _, off := e.Time.Zone(); off != 0 {
		return e, errors.New("time is not in UTC")
	}
	re := e
	if canon, err := encodeAuditLine(&re); err != nil || !bytes.Equal(canon, line) {
		return e, errors.New("line is not in the canonical encoding")
	}
	return e, nil
}

// Append appends an entry to the audit log at path, creating it if needed,
// and fsyncs it (and, for a new file, its directory) before returning the
// entry as written: Seq, Prev and Hash set, Time in UTC (now when zero).
// Append reads only the log's tail, not the whole chain (VerifyAudit does
// that): the line it chains onto must check (its own hash) and link to the
// line before it (seq one past that line's, prev its hash), which must
// check too; otherwise it is INT_002 at that line, as VerifyAudit says, and
// nothing is written. A torn tail left by a crash is written over, and so
// is a last line that fails its check and ends the file, which is what a
// crash can leave too: only a caller that keeps the head elsewhere can tell
// it from a damaged line (the engine refuses, in AppendAfter's before, to
// write over a line it recorded); Append then chains onto the line before
// it. A last line that fails its check with bytes after its newline (no
// crash leaves that) is INT_002 as well. Read and write failures are
// IO_001. Append is not safe for concurrent use on one file; the engine
// holds its writer lock.
func Append(fs vfs.FS, path string, e AuditEntry) (AuditEntry, error) {
	return AppendAfter(fs, path, e, nil)
}

// AppendAfter is Append calling before, if set, with the entry as it will
// be written (Seq, Prev and Hash set) before anything is: a caller can
// record durably which line it is about to write, and so later tell its own
// line from one somebody else appended. An error from before writes
// nothing.
func AppendAfter(fs vfs.FS, path string, e AuditEntry, before func(AuditEntry) error) (AuditEntry, error) {
	last, off, torn, err := auditTail(fs, path)
	if err != nil {
		return AuditEntry{}, err
	}
	e.Seq, e.Prev = last.Seq+1, last.Hash
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	e.Time = e.Time.UTC().Round(0)
	line, err := encodeAuditLine(&e)
	if err != nil {
		return AuditEntry{}, err
	}
	if len(line) >= maxAuditLine {
		return AuditEntry{}, errs.New(errs.CodeInvalidInput, "audit: entry of %d bytes exceeds the %d-byte line limit", len(line), maxAuditLine)
	}
	if before != nil {
		if err := before(e); err != nil {
			return AuditEntry{}, err
		}
	}
	if pad := int(torn) - len(line) - 1; pad > 0 {
		line = append(line, bytes.Repeat([]byte{' '}, pad)...)
	}
	line = append(line, '\n')
	f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return AuditEntry{}, errs.Wrap(errs.CodeWriteFailed, err, "audit: open %s", path)
	}
	if _, err := f.WriteAt(line, off); err != nil {
		_ = f.Close()
		return AuditEntry{}, errs.Wrap(errs.CodeWriteFailed, err, "audit: write %s", path)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return AuditEntry{}, errs.Wrap(errs.CodeWriteFailed, err, "audit: fsync %s", path)
	}
	if err := f.Close(); err != nil {
		return AuditEntry{}, errs.Wrap(errs.CodeWriteFailed, err, "audit: close %s", path)
	}
	if off == 0 {
		if err := syncDir(fs, fs.PathDir(path)); err != nil {
			return AuditEntry{}, errs.Wrap(errs.CodeWriteFailed, err, "audit: fsync directory of %s", path)
		}
	}
	return e, nil
}

// openAudit opens the audit log for reading. One that is not a regular file
// (a FIFO, whose open would block, a directory) is INT_002 and is not
// opened; a missing one is the not-exist error of Stat.
func openAudit(fs vfs.FS, path string) (vfs.File, error) {
	f, err := fsutil.Open(fs, path, false)
	if fsutil.IsEntryError(err) {
		return nil, errs.Wrap(errs.CodeChainBroken, err, "audit").At("", 0, path, 0)
	}
	return f, err
}

// auditTail returns the last complete line's entry (zero for none), the
// offset just after it and the length of the torn tail after that.
func auditTail(fs vfs.FS, path string) (AuditEntry, int64, int64, error) {
	f, err := openAudit(fs, path)
	if err != nil {
		if isNotExist(err) {
			return AuditEntry{}, 0, 0, nil
		}
		if errs.CodeOf(err) != "" {
			return AuditEntry{}, 0, 0, err
		}
		return AuditEntry{}, 0, 0, errs.Wrap(errs.CodeWriteFailed, err, "audit: open %s", path)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return AuditEntry{}, 0, 0, errs.Wrap(errs.CodeWriteFailed, err, "audit: stat %s", path)
	}
	e, after, err := lastLine(f, path, st.Size(), true)
	if err != nil {
		return AuditEntry{}, 0, 0, err
	}
	return e, after, st.Size() - after, nil
}

// lastLine finds the last good line among the first size bytes of the file
// and returns it with the offset just after it. A good line checks (its
// own hash) and links to the line before it, which must check too: Append
// chains onto it, and a line chained onto one VerifyAudit refuses would
// bury the damage a line deeper. With tornOK, a last line that does not
// check is taken for a torn append (see scanAudit) and the line before it
// is returned instead.
func lastLine(f vfs.File, path string, size int64, tornOK bool) (AuditEntry, int64, error) {
	line, lineOff, ok, err := wholeLineBefore(f, path, size)
	if err != nil || !ok {
		return AuditEntry{}, 0, err // !ok: nothing but a torn tail
	}
	e, err := decodeAuditLine(line)
	if err != nil {
		if !tornOK {
			return AuditEntry{}, 0, badLine(f, path, lineOff, "line before a torn one: %v", err)
		}
		if after := size - lineOff - int64(len(line)) - 1; after > 0 {
			// NB: a crash leaves a line that does not check only as
			// the file's last bytes: an append ends with its newline
			// and pads over the torn bytes it found. One with bytes
			// after its newline is damage, as VerifyAudit says;
			// written over, it and the tail were repaired silently.
			return AuditEntry{}, 0, badLine(f, path, lineOff, "%v; %d bytes follow it, so it is no torn append (a crash leaves one only at the end)", err, after)
		}
		return lastLine(f, path, lineOff, false)
	}
	// NB: the line's own hash does not say it belongs where it is: a
	// line repeated, or one left after the line before it was removed,
	// checks as well. VerifyAudit refuses such a log at that line, so
	// Append must not make it one line longer.
	n, prev := uint64(1), segment.Hash{}
	if lineOff > 0 {
		pline, poff, _, err := wholeLineBefore(f, path, lineOff)
		if err != nil {
			return AuditEntry{}, 0, err
		}
		p, err := decodeAuditLine(pline)
		if err != nil {
			return AuditEntry{}, 0, badLine(f, path, poff, "%v", err)
		}
		n, prev = p.Seq+1, p.Hash
	}
	if why := linkFault(e, n, prev); why != "" {
		return AuditEntry{}, 0, errs.New(errs.CodeChainBroken, "audit %s: line %d: %s", path, n, why).At("", n, path, lineOff)
	}
	return e, lineOff + int64(len(line)) + 1, nil
}

// wholeLineBefore returns the last whole line among the first size bytes
// of the file, without its newline, and its offset; ok is false when those
// bytes hold no newline. A read that fails is IO_001.
func wholeLineBefore(f vfs.File, path string, size int64) (line []byte, off int64, ok bool, err error) {
	// Read backwards until the window holds the last newline and the one
	// before it (or the file's start).
	for w := int64(4096); ; w *= 2 {
		w = min(w, size)
		buf := make([]byte, w)
		if err := readAt(f, buf, size-w); err != nil {
			return nil, 0, false, errs.Wrap(errs.CodeWriteFailed, err, "audit: read %s", path)
		}
		end := bytes.LastIndexByte(buf, '\n')
		if end < 0 && w == size {
			return nil, 0, false, nil
		}
		if end >= 0 {
			start := bytes.LastIndexByte(buf[:end], '\n') + 1
			if start > 0 || w == size {
				return buf[start:end], size - w + int64(start), true, nil
			}
		}
		if w >= 2*maxAuditLine+2 {
			return nil, 0, false, errs.New(errs.CodeChainBroken, "audit %s: no line ends in the last %d bytes", path, w).At("", 0, path, size-w)
		}
	}
}

// badLine is the INT_002 of the whole line at lineOff, which does not check.
// It names the line as VerifyAudit does, by its number (one past the line
// before it, when that one checks) and offset; a read that fails is the
// IO_001 it is instead.
func badLine(f vfs.File, path string, lineOff int64, format string, args ...any) error {
	what, n := "the last whole line", uint64(1)
	if lineOff > 0 {
		n = 0
		pline, _, _, err := wholeLineBefore(f, path, lineOff)
		if err != nil {
			return err
		}
		if p, err := decodeAuditLine(pline); err == nil {
			n = p.Seq + 1
		}
	}
	if n > 0 {
		what = fmt.Sprintf("line %d", n)
	}
	return errs.New(errs.CodeChainBroken, "audit %s: %s: %s", path, what, fmt.Sprintf(format, args...)).At("", n, path, lineOff)
}

// linkFault says why e, read as line n after a line hashing to prev (zero
// before the first), does not link there; "" when it does.
func linkFault(e AuditEntry, n uint64, prev segment.Hash) string {
	if e.Seq != n {
		return fmt.Sprintf("carries seq %d (a line is missing, inserted or moved)", e.Seq)
	}
	if e.Prev != prev {
		return fmt.Sprintf("prev %s does not link to line %d (%s)", e.Prev, n-1, prev)
	}
	return ""
}

// ReadAudit reads the audit log at path, checking every line and the chain
// as it goes, and yields the entries. The first failure — a malformed or
// altered line, a seq out of order, a prev that does not link — is yielded
// as an INT_002 *errs.Error whose Seq is the line number and Offset the
// line's byte offset, and ends the sequence. A missing file is an empty log.
// A torn tail after the last newline is skipped (VerifyAudit reports it).
// A stat, open or read that fails is IO_001, not INT_002: it says nothing
// of what the log holds.
func ReadAudit(fs vfs.FS, path string) iter.Seq2[AuditEntry, error] {
	return func(yield func(AuditEntry, error) bool) {
		var stopped bool
		_, err := scanAudit(fs, path, func(e AuditEntry) bool {
			if !yield(e, nil) {
				stopped = true
			}
			return !stopped
		})
		if err != nil && !stopped {
			yield(AuditEntry{}, err)
		}
	}
}

// VerifyAudit checks the whole audit log and returns its head. Its errors
// are ReadAudit's.
func VerifyAudit(fs vfs.FS, path string) (AuditHead, error) {
	return scanAudit(fs, path, func(AuditEntry) bool { return true })
}

// ioFailure is the IO_001 of a failed stat, open or read of the audit log
// at path.
func ioFailure(err error, path, format string, args ...any) error {
	e := errs.Wrap(errs.CodeWriteFailed, err, format, args...)
	e.File = path
	return e
}

func scanAudit(fs vfs.FS, path string, fn func(AuditEntry) bool) (AuditHead, error) {
	var head AuditHead
	f, err := openAudit(fs, path)
	if err != nil {
		if isNotExist(err) {
			return head, nil
		}
		if errs.CodeOf(err) != "" {
			return head, err
		}
		// NB: a stat or open that fails says nothing of what the log
		// holds: IO_001 (try again), not the INT_002 that verify and
		// compaction report as damage.
		return head, ioFailure(err, path, "audit: open %s", path)
	}
	defer f.Close()
	// The first buffer holds the whole of a small log (it grows for a
	// longer line): a scan allocates for the log, not for maxAuditLine.
	size := 4096
	if st, err := f.Stat(); err == nil && st.Size() < int64(size) {
		size = int(st.Size()) + 1
	}
	lr := newLineReader(f, size, maxAuditLine+1)
	var off int64
	for n := uint64(1); ; n++ {
		line, err := lr.next()
		if errors.Is(err, io.EOF) {
			head.Torn = int64(len(line))
			return head, nil
		}
		fail := func(format string, args ...any) error {
			return errs.New(errs.CodeChainBroken, "audit %s: line %d: %s", path, n, fmt.Sprintf(format, args...)).At("", n, path, off)
		}
		if errors.Is(err, errLineTooLong) {
			return head, fail("longer than %d bytes", maxAuditLine)
		}
		if err != nil {
			return head, ioFailure(err, path, "audit %s: read line %d at offset %d", path, n, off)
		}
		e, err := decodeAuditLine(line[:len(line)-1])
		if err != nil {
			end, rerr := lr.atEnd()
			if rerr != nil {
				// Whether the line is a torn append or damage depends
				// on what follows it, which the failed read did not say.
				return head, ioFailure(rerr, path, "audit %s: read after line %d at offset %d", path, n, off+int64(len(line)))
			}
			if end {
				// The last line: an append the crash cut short (a block of it
				// lost while its newline survived) looks exactly like this.
				// It was never acknowledged; Append writes over it. Whoever
				// needs to tell it from tampering compares the head with one
				// recorded elsewhere (the engine keeps it in its index).
				head.Torn = int64(len(line))
				return head, nil
			}
			return head, fail("%v", err)
		}
		if why := linkFault(e, n, head.Head); why != "" {
			return head, fail("%s", why)
		}
		head.Lines, head.Head = n, e.Hash
		off += int64(len(line))
		if !fn(e) {
			return head, nil
		}
	}
}
