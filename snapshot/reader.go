package snapshot

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"iter"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/blake3"
)

// Info describes a snapshot file.
type Info struct {
	Name      string       `json:"name"`
	Path      string       `json:"path"`
	Format    int          `json:"format"`
	Created   time.Time    `json:"created"`
	PolicyRef string       `json:"policy_ref"` // "" when made without a policy
	Frontier  Frontier     `json:"frontier"`
	Entries   uint64       `json:"entries"`
	RawSize   uint64       `json:"raw_size"` // decompressed body bytes
	Size      int64        `json:"size"`     // file bytes
	StateHash segment.Hash `json:"state_hash"`
	FileHash  segment.Hash `json:"file_hash"`
	// Verified is true only in an Info returned by Verify: every byte read
	// back and hashed, and every entry checked against the state hash.
	// Create's Info is not (it hashed what it wrote, not what the file
	// holds).
	Verified bool `json:"verified"`
	// Err is set by List on a file it cannot read: an INT_003 *errs.Error.
	// The other fields are then as much as the name tells (Name, Path and
	// Created when the name follows the scheme).
	Err error `json:"-"`
}

// MarshalJSON adds "error": {"code", "reason", "message"} when Err is set.
func (i Info) MarshalJSON() ([]byte, error) {
	type plain Info
	type errJSON struct {
		Code    errs.Code `json:"code"`
		Reason  string    `json:"reason"`
		Message string    `json:"message"`
	}
	out := struct {
		plain
		Error *errJSON `json:"error,omitempty"`
	}{plain: plain(i)}
	if i.Err != nil {
		c := errs.CodeOf(i.Err)
		out.Error = &errJSON{Code: c, Reason: c.Reason(), Message: i.Err.Error()}
	}
	return json.Marshal(out)
}

// Snapshot is an open snapshot file whose bytes have been checked against its
// file hash. Entries decompresses and checks the state.
type Snapshot struct {
	f       vfs.File
	path    string
	info    Info
	hdrLen  int64
	anchors []string // anchorIdx → anchor id
}

// Open opens the snapshot at path and checks everything but the entries:
// magic, version, header checksum, frontier encoding, footer checksum, sizes,
// and the file hash over every byte (one sequential read). Any mismatch,
// truncation or read failure is INT_003 (*errs.Error with File = path); a
// missing file is INPUT_001.
func Open(fs vfs.FS, path string) (*Snapshot, error) {
	f, err := openFile(fs, path)
	if err != nil {
		return nil, err
	}
	s, err := readMeta(f, fs.PathBase(path), path)
	if err == nil {
		err = s.checkFileHash()
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return s, nil
}

// openFile opens a snapshot file for reading. A missing file is INPUT_001;
// anything but a regular file (a symbolic link to one is followed) is
// INT_003 and is not opened.
//
// NB: a FIFO's open blocks until a writer comes, with no context to end
// it, and a directory reads as an I/O error: List, and with it verify,
// snapshot list and compaction, hung on a FIFO named x.snap.
func openFile(fs vfs.FS, path string) (vfs.File, error) {
	_, err := fsutil.Regular(fs, path, false)
	var ee *fsutil.EntryError
	switch {
	case errors.As(err, &ee):
		return nil, corrupt(path, 0, "%s", ee.What)
	case err != nil && isNotExist(err):
		return nil, errs.Wrap(errs.CodeInvalidInput, err, "snapshot %s does not exist", path)
	case err != nil:
		return nil, errs.Wrap(errs.CodeSnapshotCorrupted, err, "snapshot %s: stat", path).At("", 0, path, 0)
	}
	f, err := fs.Open(path)
	if err != nil {
		if isNotExist(err) {
			return nil, errs.Wrap(errs.CodeInvalidInput, err, "snapshot %s does not exist", path)
		}
		return nil, errs.Wrap(errs.CodeSnapshotCorrupted, err, "snapshot %s: open", path).At("", 0, path, 0)
	}
	return f, nil
}

// ReadInfo reads a snapshot's header and footer — not its body — and checks
// their checksums and the file's size. It is what List does per file; the
// result is not Verified.
func ReadInfo(fs vfs.FS, path string) (Info, error) {
	f, err := openFile(fs, path)
	if err != nil {
		return Info{}, err
	}
	defer f.Close()
	s, err := readMeta(f, fs.PathBase(path), path)
	if err != nil {
		return Info{}, err
	}
	return s.info, nil
}

// Verify checks a snapshot completely: Open's checks, then every entry
// (encoding, key order, versions inside the frontier, count, size) and the
// state hash. It returns the Info with Verified set.
func Verify(fs vfs.FS, path string) (Info, error) {
	s, err := Open(fs, path)
	if err != nil {
		return Info{}, err
	}
	defer s.Close()
	for _, err := range s.Entries() {
		if err != nil {
			return Info{}, err
		}
	}
	info := s.Info()
	info.Verified = true
	return info, nil
}

// List returns the snapshots in dir (files named *.snap), oldest first
// (Compare: by the records their frontiers cover, then creation time and
// name). It reads each file's header and footer only (see
// ReadInfo); a file it cannot read is listed with Err set, not dropped. A
// missing dir is an empty list. Temp files of unfinished Creates are skipped.
//
// A dir that is not a directory (a FIFO, whose list would block) is listed
// as one entry, named for dir, whose Err (INT_003) says what it is.
func List(fs vfs.FS, dir string) ([]Info, error) {
	names, err := fsutil.List(fs, dir)
	var ee *fsutil.EntryError
	if errors.As(err, &ee) {
		return []Info{{Name: fs.PathBase(dir), Path: dir, Err: corrupt(dir, 0, "the snapshots directory is %s", ee.What)}}, nil
	}
	if err != nil {
		if isNotExist(err) {
			return nil, nil
		}
		return nil, errs.Wrap(errs.CodeInvalidInput, err, "snapshot: list %s", dir)
	}
	var out []Info
	for _, n := range names {
		if !strings.HasSuffix(n, Ext) {
			continue
		}
		path := fs.PathJoin(dir, n)
		info, err := ReadInfo(fs, path)
		if err != nil && errs.CodeOf(err) == errs.CodeInvalidInput {
			// Listed, yet not there: a dangling symbolic link (or a file
			// removed since), which is no snapshot either.
			err = corrupt(path, 0, "listed in %s but does not open: a dangling symbolic link, or removed since", dir)
		}
		if err != nil {
			info = Info{Name: n, Path: path, Err: err}
			if t, ok := parseFileName(n); ok {
				info.Created = t
			}
		}
		out = append(out, info)
	}
	slices.SortFunc(out, Compare)
	return out, nil
}

// Compare orders snapshots oldest first, for List and the planner: by the
// records their frontiers cover, then by creation time, then by name. A
// file that could not be read (Err set) has no frontier and sorts before
// every readable one.
//
// NB: not by creation time first. The time is the clock's at Create, and a
// clock that went back dates a later snapshot before earlier ones; the
// frontier of one log only grows (every anchor's seq), so a later snapshot
// of it covers more records than any earlier one.
func Compare(a, b Info) int {
	if c := cmp.Compare(boolRank(a.Err == nil), boolRank(b.Err == nil)); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Frontier.Records(), b.Frontier.Records()); c != 0 {
		return c
	}
	if c := a.Created.Compare(b.Created); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// readMeta reads and checks header and footer.
func readMeta(f vfs.File, name, path string) (*Snapshot, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, errs.Wrap(errs.CodeSnapshotCorrupted, err, "snapshot %s: stat", path).At("", 0, path, 0)
	}
	size := st.Size()
	if size < headerMin+footerSize {
		return nil, corrupt(path, 0, "file of %d bytes is shorter than a header and footer (%d)", size, headerMin+footerSize)
	}
	fixed := make([]byte, headerFixed)
	if err := readAt(f, fixed, 0); err != nil {
		return nil, errs.Wrap(errs.CodeSnapshotCorrupted, err, "snapshot %s: read header", path).At("", 0, path, 0)
	}
	if string(fixed[:8]) != string(Magic[:]) {
		return nil, corrupt(path, 0, "bad magic %q", fixed[:8])
	}
	if fixed[8] != FormatVersion {
		return nil, corrupt(path, 8, "format version %d, want %d", fixed[8], FormatVersion)
	}
	if fixed[9] != compressionZstd {
		return nil, corrupt(path, 9, "compression %d, want %d (zstd)", fixed[9], compressionZstd)
	}
	hlen := int64(be.Uint32(fixed[10:]))
	if hlen < headerMin || hlen > size-footerSize {
		return nil, corrupt(path, 10, "header length %d outside %d..%d", hlen, headerMin, size-footerSize)
	}
	hb := make([]byte, hlen)
	if err := readAt(f, hb, 0); err != nil {
		return nil, errs.Wrap(errs.CodeSnapshotCorrupted, err, "snapshot %s: read header", path).At("", 0, path, 0)
	}
	h, err := parseHeader(hb)
	if err != nil {
		return nil, corrupt(path, 0, "%v", err)
	}
	fb := make([]byte, footerSize)
	if err := readAt(f, fb, size-footerSize); err != nil {
		return nil, errs.Wrap(errs.CodeSnapshotCorrupted, err, "snapshot %s: read footer", path).At("", 0, path, size-footerSize)
	}
	ft, err := parseFooter(fb, h.checksum)
	if err != nil {
		return nil, corrupt(path, size-footerSize, "%v", err)
	}
	if ft.bodyLen != uint64(size-hlen-footerSize) {
		return nil, corrupt(path, size-footerSize, "footer says the body is %d bytes; the file holds %d", ft.bodyLen, size-hlen-footerSize)
	}
	if ft.entries > ft.rawSize/(entryFixed+1) {
		return nil, corrupt(path, size-footerSize, "%d entries cannot fit in %d raw bytes", ft.entries, ft.rawSize)
	}
	s := &Snapshot{f: f, path: path, hdrLen: hlen, anchors: h.anchors}
	s.info = Info{
		Name: name, Path: path, Format: FormatVersion, Created: h.created, Frontier: h.frontier,
		Entries: ft.entries, RawSize: ft.rawSize, Size: size, StateHash: ft.stateHash, FileHash: ft.fileHash,
	}
	if !h.policyRef.IsZero() {
		s.info.PolicyRef = h.policyRef.String()
	}
	return s, nil
}

// checkFileHash hashes every byte before the file hash and compares.
func (s *Snapshot) checkFileHash() error {
	h := blake3.NewDeriveKey(ContextFile)
	n := s.info.Size - hashSize
	r := io.NewSectionReader(s.f, 0, n)
	buf := make([]byte, 256<<10)
	if _, err := io.CopyBuffer(struct{ io.Writer }{h}, r, buf); err != nil {
		return errs.Wrap(errs.CodeSnapshotCorrupted, err, "snapshot %s: read", s.path).At("", 0, s.path, 0)
	}
	var got segment.Hash
	h.Sum(got[:0])
	if got != s.info.FileHash {
		return corrupt(s.path, n, "file hash %s does not match the contents (%s)", s.info.FileHash, got)
	}
	return nil
}

// Info returns what the header and footer say. Verified is false: see Verify.
func (s *Snapshot) Info() Info { return s.info }

// Close closes the file.
func (s *Snapshot) Close() error { return s.f.Close() }

// maxDecoderWindow bounds the zstd window a body may ask for; the writer uses
// at most 8 MiB.
const maxDecoderWindow = 64 << 20

// decoders keeps zstd decoders across reads. Concurrency 1 decodes in the
// caller's goroutine: nothing runs ahead of the consumer.
var decoders sync.Pool

func getDecoder(r io.Reader) (*zstd.Decoder, error) {
	if dec, ok := decoders.Get().(*zstd.Decoder); ok {
		if err := dec.Reset(r); err != nil {
			return nil, err
		}
		return dec, nil
	}
	return zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxDecoderWindow))
}

func putDecoder(dec *zstd.Decoder) {
	if err := dec.Reset(nil); err != nil {
		dec.Close()
		return
	}
	decoders.Put(dec)
}

// Entries decompresses the body and yields the entries in key order, checking
// each (encoding, ascending keys, version inside the frontier) and, at the
// end, the entry count, raw size and state hash. Any failure is yielded as an
// INT_003 *errs.Error and ends the sequence. Because the state hash can only
// be compared at the end, a consumer that applies entries must discard them
// if the sequence ends in an error. Key and Value alias buffers reused by the
// next entry: Clone to keep them. Entries may be ranged over more than once.
func (s *Snapshot) Entries() iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		body := io.NewSectionReader(s.f, s.hdrLen, s.info.Size-s.hdrLen-footerSize)
		dec, err := getDecoder(body)
		if err != nil {
			yield(Entry{}, errs.Wrap(errs.CodeSnapshotCorrupted, err, "snapshot %s: zstd decoder", s.path).At("", 0, s.path, s.hdrLen))
			return
		}
		defer putDecoder(dec)
		r := entryReader{s: s, br: bufio.NewReaderSize(dec, 64<<10), state: NewStateHasher()}
		for i := uint64(0); i < s.info.Entries; i++ {
			e, err := r.next(i)
			if err != nil {
				yield(Entry{}, err)
				return
			}
			if !yield(e, nil) {
				return
			}
		}
		if err := r.finish(); err != nil {
			yield(Entry{}, err)
		}
	}
}

// entryReader decodes the raw entry stream.
type entryReader struct {
	s      *Snapshot
	br     *bufio.Reader
	state  *StateHasher
	raw    uint64
	key    []byte
	val    []byte
	fixed  [entryFixed - 8]byte
	lenBuf [4]byte
}

func (r *entryReader) bad(i uint64, format string, args ...any) error {
	return corrupt(r.s.path, r.s.hdrLen, "entry %d (raw offset %d): %s", i, r.raw, fmt.Sprintf(format, args...))
}

// readLen reads a u32 length and checks it against what is left of raw size.
func (r *entryReader) readLen(i uint64, what string, max int) (int, error) {
	if _, err := io.ReadFull(r.br, r.lenBuf[:]); err != nil {
		return 0, r.bad(i, "reading %s length: %v", what, err)
	}
	r.raw += 4
	n := be.Uint32(r.lenBuf[:])
	if int64(n) > int64(max) || uint64(n) > r.s.info.RawSize-min(r.raw, r.s.info.RawSize) {
		return 0, r.bad(i, "%s length %d exceeds the format or the raw size %d", what, n, r.s.info.RawSize)
	}
	return int(n), nil
}

func (r *entryReader) next(i uint64) (Entry, error) {
	kl, err := r.readLen(i, "key", segment.MaxFormatKey)
	if err != nil {
		return Entry{}, err
	}
	if kl == 0 {
		return Entry{}, r.bad(i, "empty key")
	}
	r.key = grow(r.key, kl)
	if _, err := io.ReadFull(r.br, r.key); err != nil {
		return Entry{}, r.bad(i, "reading key: %v", err)
	}
	r.raw += uint64(kl)
	vl, err := r.readLen(i, "value", segment.MaxFormatValue)
	if err != nil {
		return Entry{}, err
	}
	r.val = grow(r.val, vl)
	if _, err := io.ReadFull(r.br, r.val); err != nil {
		return Entry{}, r.bad(i, "reading value: %v", err)
	}
	r.raw += uint64(vl)
	if _, err := io.ReadFull(r.br, r.fixed[:]); err != nil {
		return Entry{}, r.bad(i, "reading version: %v", err)
	}
	r.raw += uint64(len(r.fixed))
	b := r.fixed[:]
	idx := be.Uint32(b)
	if int(idx) >= len(r.s.anchors) {
		return Entry{}, r.bad(i, "version anchor index %d; the frontier has %d anchors", idx, len(r.s.anchors))
	}
	v := Version{Anchor: r.s.anchors[idx], Seq: be.Uint64(b[4:]), Counter: be.Uint64(b[12:]), Time: int64(be.Uint64(b[20:]))}
	copy(v.Hash[:], b[28:])
	if fs := r.s.info.Frontier[v.Anchor].Seq; v.Seq == 0 || v.Seq > fs {
		return Entry{}, r.bad(i, "version %q/%d lies outside the frontier (seq 1..%d)", v.Anchor, v.Seq, fs)
	}
	if err := r.state.Add(r.key, r.val); err != nil {
		return Entry{}, r.bad(i, "%v", err)
	}
	return Entry{Key: r.key, Value: r.val, Version: v}, nil
}

// finish checks that the stream ends here and that it hashes to the state
// hash of the footer.
func (r *entryReader) finish() error {
	n := r.s.info.Entries
	if _, err := r.br.ReadByte(); !errors.Is(err, io.EOF) {
		if err != nil {
			return r.bad(n, "after the last entry: %v", err)
		}
		return r.bad(n, "data after the last of %d entries", n)
	}
	if r.raw != r.s.info.RawSize {
		return r.bad(n, "entries hold %d raw bytes; the footer says %d", r.raw, r.s.info.RawSize)
	}
	if got := r.state.Sum(); got != r.s.info.StateHash {
		return corrupt(r.s.path, r.s.info.Size-footerSize, "entries hash to state %s; the footer says %s", got, r.s.info.StateHash)
	}
	return nil
}

func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

func readAt(f vfs.File, b []byte, off int64) error {
	n, err := f.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return err
}

func isNotExist(err error) bool {
	return errors.Is(err, iofs.ErrNotExist) || errors.Is(err, os.ErrNotExist)
}
