package segment

import (
	"errors"
	"fmt"
	"io"

	"github.com/anchordb/anchordb/internal/errs"
)

// Frame is one record read from a segment, with its place in the file.
type Frame struct {
	Offset int64
	Size   int
	Record Record // slices alias the scanner's buffer until the next call
}

// Scanner reads a segment file front to back, checking every frame's hash and
// the chain: seqs follow the header's first seq with no gap, each prev_hash is
// the previous record's hash (the header's prev hash for the first). It is the
// one reader used by recovery, verification and index rebuilds, so all three
// agree on what a valid segment is.
type Scanner struct {
	// SkipHashes, when set before the first Next, trusts each frame's stored
	// hash instead of recomputing it. Seqs, links and seals are still checked,
	// so the chain of stored hashes holds together, but a record whose body
	// was altered goes unnoticed: only a rebuild from a verified snapshot uses
	// it, and verification never does.
	SkipHashes bool
	// MaxBody, when > 0, is the longest frame body the caller takes
	// (Limits.MaxBody of its limits). A frame that declares a longer one is
	// refused from its length alone, before any of it is read or buffered,
	// with a *FrameError of kind OverLimit: the length is the writer's word,
	// and a reader of another database's segments (an ingest) must not let
	// it size a read. Zero bounds frames by the format (MaxFrameBody) and by
	// the file size only, as our own segments, written under limits that
	// may since have been lowered, are read. An OverLimit finding alone does
	// not stick: nothing was read, and a caller that raises MaxBody may call
	// Next again to read the frame.
	MaxBody int

	r      io.ReaderAt
	size   int64
	Header Header
	// HeaderSize is the size of the header in bytes; frames start there.
	HeaderSize int

	off      int64 // file offset of the next frame
	buf      []byte
	bufStart int64 // file offset of buf[0]

	nextSeq  uint64
	prevHash Hash
	count    uint64
	footer   *Footer
	err      error
}

// Buffer returns the scanner's read buffer, for a later NewScannerBuffer.
func (s *Scanner) Buffer() []byte { return s.buf[:0] }

// scanChunk is the read size. Frames larger than this are read whole (their
// length is bounded by the file size, never trusted on its own).
const scanChunk = 1 << 20

// NewScanner reads and checks the header of a segment of the given size. A
// file too short to hold its header yields a Torn *FrameError.
func NewScanner(r io.ReaderAt, size int64) (*Scanner, error) {
	return NewScannerBuffer(r, size, nil)
}

// NewScannerBuffer is NewScanner reading into buf while it is large enough,
// so a caller scanning many segments can reuse one buffer (see Buffer).
// Records from Next point into the buffer, as with NewScanner: a caller
// must be done with them before it reuses the buffer.
func NewScannerBuffer(r io.ReaderAt, size int64, buf []byte) (*Scanner, error) {
	s := &Scanner{r: r, size: size, buf: buf[:0]}
	if err := s.fill(0, min(size, int64(headerFixed+MaxAnchorID))); err != nil {
		return nil, err
	}
	h, n, err := ParseHeader(s.buf)
	if err != nil {
		return nil, err
	}
	s.Header, s.HeaderSize = h, n
	s.off = int64(n)
	s.nextSeq, s.prevHash = h.FirstSeq, h.PrevHash
	return s, nil
}

// fill makes buf hold at least n bytes from off (fewer only at EOF).
func (s *Scanner) fill(off, n int64) error {
	if off >= s.bufStart && off+n <= s.bufStart+int64(len(s.buf)) {
		return nil
	}
	want := max(n, scanChunk)
	if rest := s.size - off; want > rest {
		want = rest
	}
	if want < 0 {
		want = 0
	}
	if int64(cap(s.buf)) < want {
		s.buf = make([]byte, want)
	}
	s.buf = s.buf[:want]
	m, err := s.r.ReadAt(s.buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read segment at %d: %w", off, err)
	}
	s.buf, s.bufStart = s.buf[:m], off
	return nil
}

// window returns the bytes from off to the end of what is buffered.
func (s *Scanner) window(off int64) []byte { return s.buf[off-s.bufStart:] }

// Next returns the next frame. At the end it returns io.EOF; a seal ends the
// segment (Footer then reports it). A frame that cannot be read yields a
// *FrameError whose Offset is the frame's file offset; the scanner stops there
// (but for an OverLimit finding: see MaxBody).
func (s *Scanner) Next() (Frame, error) {
	if s.err != nil {
		return Frame{}, s.err
	}
	f, err := s.next()
	var fe *FrameError
	if err != nil && !(errors.As(err, &fe) && fe.Kind == OverLimit) {
		s.err = err
	}
	return f, err
}

func (s *Scanner) next() (Frame, error) {
	if s.footer != nil {
		if s.off != s.size {
			return Frame{}, &FrameError{Kind: Corrupt, Code: errs.CodeChainBroken, Offset: s.off, Msg: fmt.Sprintf("%d bytes after the seal", s.size-s.off)}
		}
		return Frame{}, io.EOF
	}
	if s.off == s.size {
		return Frame{}, io.EOF
	}
	if err := s.fill(s.off, 4); err != nil {
		return Frame{}, err
	}
	w := s.window(s.off)
	if len(w) >= 4 && be.Uint32(w) == sealMarker {
		return Frame{}, s.readSeal()
	}
	if len(w) >= 4 {
		// The length is untrusted: bound it by the format, then by the file,
		// before reading.
		bodyLen := be.Uint32(w)
		if bodyLen > maxFrameBody || bodyLen > MaxFrameBody {
			return Frame{}, &FrameError{Kind: Corrupt, Code: errs.CodeHashMismatch, Offset: s.off, Seq: s.nextSeq,
				Msg: fmt.Sprintf("frame length %d exceeds the format maximum", bodyLen)}
		}
		if s.MaxBody > 0 && int64(bodyLen) > int64(s.MaxBody) {
			// NB: before the end-of-file check, which may probe the rest of
			// the file for a valid record.
			return Frame{}, &FrameError{Kind: OverLimit, Code: errs.CodeInvalidInput, Offset: s.off, Seq: s.nextSeq,
				Msg: fmt.Sprintf("frame declares a body of %d bytes, above the %d bytes this reader takes", bodyLen, s.MaxBody)}
		}
		n := int64(4) + int64(bodyLen) + HashSize
		if n > s.size-s.off {
			// A length that runs past the end is what a torn write leaves —
			// or a damaged length in front of good records. Only the first
			// may be cut, so look for a valid record further on.
			if at, ok := s.validFrameAfter(s.off + 1); ok {
				return Frame{}, &FrameError{Kind: Corrupt, Code: errs.CodeHashMismatch, Offset: s.off, Seq: s.nextSeq,
					Msg: fmt.Sprintf("damaged frame length %d, yet a valid record follows at offset %d", bodyLen, at)}
			}
			return Frame{}, &FrameError{Kind: Torn, Offset: s.off, Seq: s.nextSeq,
				Msg: fmt.Sprintf("frame of %d bytes, only %d left in the file", n, s.size-s.off)}
		}
		if err := s.fill(s.off, n); err != nil {
			return Frame{}, err
		}
		w = s.window(s.off)
	}
	parse := ParseFrame
	if s.SkipHashes {
		parse = DecodeFrame
	}
	rec, n, err := parse(s.Header.Anchor, w)
	if err != nil {
		var fe *FrameError
		if errors.As(err, &fe) {
			// The seq read from damaged bytes means nothing: name the one
			// that belongs here.
			fe.Offset, fe.Seq = s.off, s.nextSeq
		}
		return Frame{}, err
	}
	if rec.Seq != s.nextSeq {
		return Frame{}, &FrameError{Kind: Corrupt, Code: errs.CodeChainBroken, Offset: s.off, Seq: s.nextSeq,
			Msg: fmt.Sprintf("record has seq %d where seq %d belongs", rec.Seq, s.nextSeq)}
	}
	if rec.PrevHash != s.prevHash {
		return Frame{}, &FrameError{Kind: Corrupt, Code: errs.CodeChainBroken, Offset: s.off, Seq: s.nextSeq,
			Msg: fmt.Sprintf("seq %d: prev_hash %s does not link to %s", rec.Seq, rec.PrevHash, s.prevHash)}
	}
	f := Frame{Offset: s.off, Size: n, Record: rec}
	s.off += int64(n)
	s.nextSeq++
	s.prevHash = rec.Hash
	s.count++
	return f, nil
}

// validFrameAfter reports whether any whole record of this segment with a
// seq at or after the expected one, or a valid seal, starts at or after from.
// Every candidate must pass its hash, so random bytes never qualify. It runs
// only when a frame looks torn, to tell a torn tail from a damaged length.
//
// NB: the rest of the file may be far larger than any frame (a segment may
// be up to 1 TiB, and a damaged or hostile one larger), so it is read a
// probeChunk at a time, with at most one candidate frame held whole: memory
// stays within a frame (bounded by the format, and by the file) and a
// chunk, whatever the file's size. (From Next, with MaxBody set, the rest
// of the file is shorter than a frame MaxBody allows.)
func (s *Scanner) validFrameAfter(from int64) (int64, bool) {
	var buf []byte
	var bufStart int64
	// at returns the buffered bytes from off on, holding at least n of them.
	at := func(off, n int64) ([]byte, bool) {
		if off >= bufStart && off+n <= bufStart+int64(len(buf)) {
			return buf[off-bufStart:], true
		}
		want := min(n+probeChunk, s.size-off)
		if int64(cap(buf)) < want {
			buf = make([]byte, want)
		}
		buf = buf[:want]
		if m, err := s.r.ReadAt(buf, off); err != nil && int64(m) != want {
			return nil, false
		}
		bufStart = off
		return buf, true
	}
	const minFrame = 4 + bodyFixed + HashSize
	for off := from; s.size-off >= FooterSize; off++ {
		rest := s.size - off
		w, ok := at(off, min(rest, minFrame))
		if !ok {
			return 0, false
		}
		if be.Uint32(w) == sealMarker {
			if _, err := parseFooter(w[:FooterSize], s.Header.Checksum); err == nil {
				return off, true
			}
			continue
		}
		if rest < minFrame {
			continue
		}
		bodyLen := int64(be.Uint32(w))
		n := 4 + bodyLen + HashSize
		if bodyLen < bodyFixed || bodyLen > MaxFrameBody || n > rest {
			continue
		}
		if seq := be.Uint64(w[4:]); seq < s.nextSeq {
			continue
		}
		if n > probeChunk {
			// NB: a candidate is read whole only once its lengths tile its
			// body as a record's do; damaged or random bytes claim long
			// lengths often, and tile almost never.
			tiles, ok := s.bodyTiles(off, bodyLen, buf, bufStart)
			if !ok {
				return 0, false
			}
			if !tiles {
				continue
			}
		}
		if w, ok = at(off, n); !ok {
			return 0, false
		}
		if _, _, err := ParseFrame(s.Header.Anchor, w[:n]); err == nil {
			return off, true
		}
	}
	return 0, false
}

// bodyTiles reports whether the lengths inside the frame body of bodyLen
// bytes at off (type, key, value, idempotency key, then the prev hash) end
// exactly where the body does, as DecodeBody requires, reading only the
// length fields: from buf (file offset bufStart) where it holds them, else
// from the file. ok is false when a read fails.
func (s *Scanner) bodyTiles(off, bodyLen int64, buf []byte, bufStart int64) (tiles, ok bool) {
	var scratch [4]byte
	field := func(p, k int64) ([]byte, bool) {
		at := off + 4 + p
		if at >= bufStart && at+k <= bufStart+int64(len(buf)) {
			return buf[at-bufStart : at-bufStart+k], true
		}
		if m, err := s.r.ReadAt(scratch[:k], at); err != nil && int64(m) != k {
			return nil, false
		}
		return scratch[:k], true
	}
	b, ok := field(24, 1)
	if !ok {
		return false, false
	}
	p := 25 + int64(b[0])
	for _, width := range []int64{4, 4, 2} { // key, value, idempotency key
		if p+width > bodyLen {
			return false, true
		}
		if b, ok = field(p, width); !ok {
			return false, false
		}
		n := int64(be.Uint16(b))
		if width == 4 {
			n = int64(be.Uint32(b))
		}
		p += width + n
	}
	return bodyLen-p == HashSize, true
}

// probeChunk is how much of the file validFrameAfter reads at a time, beyond
// the candidate frame it needs whole.
const probeChunk = 1 << 20

func (s *Scanner) readSeal() error {
	if s.size-s.off < FooterSize {
		return &FrameError{Kind: Torn, Offset: s.off, Seq: s.nextSeq, Msg: "seal cut short"}
	}
	if err := s.fill(s.off, FooterSize); err != nil {
		return err
	}
	ft, err := parseFooter(s.window(s.off)[:FooterSize], s.Header.Checksum)
	if err != nil {
		return &FrameError{Kind: Corrupt, Code: errs.CodeHashMismatch, Offset: s.off, Seq: s.nextSeq, Msg: err.Error()}
	}
	if ft.Count != s.count || ft.LastSeq != s.nextSeq-1 || ft.LastHash != s.prevHash || s.count == 0 {
		return &FrameError{Kind: Corrupt, Code: errs.CodeChainBroken, Offset: s.off, Seq: s.nextSeq,
			Msg: fmt.Sprintf("seal names %d records ending at seq %d (%s); segment holds %d ending at seq %d (%s)",
				ft.Count, ft.LastSeq, ft.LastHash, s.count, s.nextSeq-1, s.prevHash)}
	}
	s.footer = &ft
	s.off += FooterSize
	if s.off != s.size {
		return &FrameError{Kind: Corrupt, Code: errs.CodeChainBroken, Offset: s.off, Msg: fmt.Sprintf("%d bytes after the seal", s.size-s.off)}
	}
	return io.EOF
}

// WholeRecordAfter reports whether a whole record of this segment (seq at or
// after the one expected next, hash checked) or a valid seal starts anywhere
// after the last good frame. After Next fails, it tells damage in
// front of good records (never to be cut) from a tail that is torn through.
func (s *Scanner) WholeRecordAfter() bool {
	_, ok := s.validFrameAfter(s.off + 1)
	return ok
}

// Offset is the file offset just past the last good frame (or seal): where a
// torn tail would be cut.
func (s *Scanner) Offset() int64 { return s.off }

// Footer returns the seal once the scanner has read it, else nil.
func (s *Scanner) Footer() *Footer { return s.footer }

// NextSeq is the seq the next frame must carry; HeadHash the hash it must link
// to. After a full scan they describe the segment's head.
func (s *Scanner) NextSeq() uint64 { return s.nextSeq }

// HeadHash is the hash of the last good record (or the header's prev hash).
func (s *Scanner) HeadHash() Hash { return s.prevHash }

// Count is the number of good frames read so far.
func (s *Scanner) Count() uint64 { return s.count }

// ReadFrameAt reads and checks the frame of size bytes at off. The record is
// a copy: it does not alias buf. It checks the hash, the anchor (through the
// hash) and that the seq is the one expected.
func ReadFrameAt(r io.ReaderAt, anchor string, off int64, size int, wantSeq uint64, buf []byte) (Record, []byte, error) {
	if size < 0 || size > MaxFrameSize {
		// NB: the size comes from the index; one larger than any frame
		// must not size the buffer (4 GiB from a damaged row).
		return Record{}, buf, &FrameError{Kind: Corrupt, Code: errs.CodeIndexMismatch, Offset: off, Seq: wantSeq,
			Msg: fmt.Sprintf("index says the frame is %d bytes; no frame is larger than %d", size, MaxFrameSize)}
	}
	if cap(buf) < size {
		buf = make([]byte, size)
	}
	buf = buf[:size]
	if n, err := r.ReadAt(buf, off); n != size {
		if err == nil || errors.Is(err, io.EOF) {
			return Record{}, buf, &FrameError{Kind: Torn, Offset: off, Seq: wantSeq, Msg: fmt.Sprintf("read %d of %d bytes", n, size)}
		}
		return Record{}, buf, fmt.Errorf("read frame at %d: %w", off, err)
	}
	rec, n, err := ParseFrame(anchor, buf)
	if err != nil {
		var fe *FrameError
		if errors.As(err, &fe) {
			fe.Offset, fe.Seq = off, wantSeq
			if fe.Kind == Torn {
				// The index promised size bytes; a frame longer than that is
				// the index disagreeing with the segment.
				fe.Kind, fe.Code = Corrupt, errs.CodeIndexMismatch
			}
		}
		if errors.Is(err, errSealMarker) {
			return Record{}, buf, &FrameError{Kind: Corrupt, Code: errs.CodeIndexMismatch, Offset: off, Seq: wantSeq, Msg: "index points at a seal"}
		}
		return Record{}, buf, err
	}
	if n != size {
		return Record{}, buf, &FrameError{Kind: Corrupt, Code: errs.CodeIndexMismatch, Offset: off, Seq: wantSeq, Msg: fmt.Sprintf("frame is %d bytes, index says %d", n, size)}
	}
	if rec.Seq != wantSeq {
		return Record{}, buf, &FrameError{Kind: Corrupt, Code: errs.CodeChainBroken, Offset: off, Seq: wantSeq, Msg: fmt.Sprintf("frame holds seq %d, index says %d", rec.Seq, wantSeq)}
	}
	return rec.Clone(), buf, nil
}

// Resume moves the scanner to off, trusting the bytes before it (the caller
// has them indexed): the next frame must carry nextSeq and link to prevHash,
// and count frames precede off in this segment.
func (s *Scanner) Resume(off int64, nextSeq uint64, prevHash Hash, count uint64) {
	s.off, s.nextSeq, s.prevHash, s.count = off, nextSeq, prevHash, count
	s.footer, s.err = nil, nil
}
