package segment

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A segment file is a header, zero or more frames, and — once sealed — a
// footer:
//
//	header:
//	+----------+---------+-----------+-----------+-------+-----------+-----------+----------+
//	| magic    | version | anchorLen | anchor id | segno | first seq | prev hash | checksum |
//	| 8 bytes  | u8 = 1  | u8        | anchorLen | u64   | u64       | 32 bytes  | 32 bytes |
//	+----------+---------+-----------+-----------+-------+-----------+-----------+----------+
//
//	footer (the seal):
//	+------------+----------+-------+-----------+----------+
//	| 0xFFFFFFFF | last seq | count | last hash | checksum |
//	| u32        | u64      | u64   | 32 bytes  | 32 bytes |
//	+------------+----------+-------+-----------+----------+
//
// The header checksum is BLAKE3 derive-key(ContextHeader) over the header bytes
// before it; the footer checksum is derive-key(ContextSeal) over the header
// checksum and the footer bytes before it, so a footer cannot be moved to
// another segment. The 0xFFFFFFFF marker can never be a frame length (frame
// bodies are below 2^31 bytes).

// Magic opens every segment file.
var Magic = [8]byte{'A', 'N', 'C', 'H', 'S', 'E', 'G', '\n'}

const (
	sealMarker  = 0xFFFFFFFF
	headerFixed = 8 + 1 + 1 + 8 + 8 + HashSize + HashSize
	// FooterSize is the size of a seal: a sealed segment ends in exactly
	// these bytes, so ReadSeal reads them from the end without a scan.
	FooterSize   = 4 + 8 + 8 + HashSize + HashSize
	maxFrameBody = 1<<31 - 1
)

// Header is the parsed header of a segment file.
type Header struct {
	Anchor   string
	Segno    uint64 // 1-based
	FirstSeq uint64 // seq of the first record this segment holds
	PrevHash Hash   // hash of record FirstSeq-1, or the genesis hash
	Checksum Hash
}

// HeaderSize returns the encoded size of a header for the anchor id.
func HeaderSize(anchor string) int { return headerFixed + len(anchor) }

// AppendHeader computes h.Checksum and appends the encoded header to dst.
func AppendHeader(dst []byte, h *Header) []byte {
	start := len(dst)
	dst = append(dst, Magic[:]...)
	dst = append(dst, FormatVersion, byte(len(h.Anchor)))
	dst = append(dst, h.Anchor...)
	dst = be.AppendUint64(dst, h.Segno)
	dst = be.AppendUint64(dst, h.FirstSeq)
	dst = append(dst, h.PrevHash[:]...)
	h.Checksum = headerHashers.sum(dst[start:])
	return append(dst, h.Checksum[:]...)
}

// ParseHeader parses a header from the start of b. It returns the header size.
// A b shorter than the header yields a *FrameError of kind Torn.
func ParseHeader(b []byte) (Header, int, error) {
	var h Header
	if len(b) < 10 {
		return h, 0, &FrameError{Kind: Torn, Offset: 0, Msg: fmt.Sprintf("segment is %d bytes, shorter than a header", len(b))}
	}
	if !bytes.Equal(b[:8], Magic[:]) {
		return h, 0, &FrameError{Kind: Corrupt, Code: errs.CodeHashMismatch, Offset: 0, Msg: "bad segment magic"}
	}
	if b[8] != FormatVersion {
		return h, 0, &FrameError{Kind: Corrupt, Code: errs.CodeHashMismatch, Offset: 8, Msg: fmt.Sprintf("segment format version %d, want %d", b[8], FormatVersion)}
	}
	aLen := int(b[9])
	size := headerFixed + aLen
	if len(b) < size {
		// Torn, unless the length byte itself is damaged: then a shorter
		// header verifies.
		fixed := make([]byte, 0, headerFixed+MaxAnchorID)
		for alt := 1; alt <= MaxAnchorID && headerFixed+alt <= len(b); alt++ {
			n := headerFixed + alt
			fixed = append(fixed[:0], b[:n-HashSize]...)
			fixed[9] = byte(alt)
			if headerHashers.sum(fixed) == Hash(b[n-HashSize:n]) {
				return h, 0, &FrameError{Kind: Corrupt, Code: errs.CodeHashMismatch, Offset: 9, Msg: "segment header anchor length is damaged"}
			}
		}
		return h, 0, &FrameError{Kind: Torn, Offset: 0, Msg: fmt.Sprintf("segment is %d bytes, shorter than its %d-byte header", len(b), size)}
	}
	p := 10
	h.Anchor = string(b[p : p+aLen])
	p += aLen
	h.Segno = be.Uint64(b[p:])
	h.FirstSeq = be.Uint64(b[p+8:])
	copy(h.PrevHash[:], b[p+16:])
	copy(h.Checksum[:], b[p+16+HashSize:])
	if want := headerHashers.sum(b[:size-HashSize]); want != h.Checksum {
		return h, 0, &FrameError{Kind: Corrupt, Code: errs.CodeHashMismatch, Offset: 0, Msg: "segment header checksum mismatch"}
	}
	if err := ValidateAnchorID(h.Anchor); err != nil {
		return h, 0, &FrameError{Kind: Corrupt, Code: errs.CodeHashMismatch, Offset: 10, Msg: err.Error()}
	}
	if h.Segno == 0 || h.FirstSeq == 0 {
		return h, 0, &FrameError{Kind: Corrupt, Code: errs.CodeHashMismatch, Offset: 10, Msg: "segment number and first seq start at 1"}
	}
	if h.FirstSeq == 1 && h.PrevHash != GenesisHash(h.Anchor) {
		return h, 0, &FrameError{Kind: Corrupt, Code: errs.CodeChainBroken, Offset: int64(p + 16), Msg: "the first segment does not link to the anchor's genesis hash"}
	}
	return h, size, nil
}

// Footer is the seal of a segment: after it, the segment never changes.
type Footer struct {
	LastSeq  uint64
	Count    uint64
	LastHash Hash
	Checksum Hash
}

// AppendFooter computes f.Checksum (bound to the segment's header checksum)
// and appends the encoded footer to dst.
func AppendFooter(dst []byte, f *Footer, headerChecksum Hash) []byte {
	start := len(dst)
	dst = be.AppendUint32(dst, sealMarker)
	dst = be.AppendUint64(dst, f.LastSeq)
	dst = be.AppendUint64(dst, f.Count)
	dst = append(dst, f.LastHash[:]...)
	f.Checksum = sealHashers.sum(headerChecksum[:], dst[start:])
	return append(dst, f.Checksum[:]...)
}

func parseFooter(b []byte, headerChecksum Hash) (Footer, error) {
	var f Footer
	f.LastSeq = be.Uint64(b[4:])
	f.Count = be.Uint64(b[12:])
	copy(f.LastHash[:], b[20:])
	copy(f.Checksum[:], b[20+HashSize:])
	if want := sealHashers.sum(headerChecksum[:], b[:FooterSize-HashSize]); want != f.Checksum {
		return f, fmt.Errorf("seal checksum mismatch")
	}
	return f, nil
}

// FrameErrorKind tells a torn write apart from corruption.
type FrameErrorKind int

const (
	// Torn means the bytes end before the frame does: what a crash leaves at
	// the tail of the newest segment. Anywhere else it is corruption.
	Torn FrameErrorKind = iota + 1
	// Corrupt means the bytes are all there and wrong.
	Corrupt
	// OverLimit means a frame declares a body longer than the reader takes
	// (Scanner.MaxBody): it may be a good record, written under larger
	// limits, but it is refused unread (INPUT_001). Never torn: nothing is
	// cut for it.
	OverLimit
)

// FrameError reports a frame that cannot be read, with its file offset.
type FrameError struct {
	Kind   FrameErrorKind
	Code   errs.Code // for Corrupt: INT_001 (content) or INT_002 (chain); for OverLimit: INPUT_001
	Offset int64
	Seq    uint64 // the seq expected at Offset, when known
	Msg    string
}

// Error says torn, corrupt or over-limit, the file offset and what was wrong.
func (e *FrameError) Error() string {
	kind := "torn"
	switch e.Kind {
	case Corrupt:
		kind = "corrupt"
	case OverLimit:
		kind = "over-limit"
	}
	return fmt.Sprintf("%s frame at offset %d: %s", kind, e.Offset, e.Msg)
}

// AsError converts the finding to a coded *errs.Error located in file. A torn
// frame is reported as a chain break (INT_002): records are missing.
func (e *FrameError) AsError(anchor, file string) *errs.Error {
	code := e.Code
	if code == "" {
		code = errs.CodeChainBroken
	}
	return (&errs.Error{Code: code, Message: e.Error()}).At(anchor, e.Seq, file, e.Offset)
}

// ParseFrame parses one frame at the start of b for the anchor and checks its
// hash. It returns the frame's total size. When b ends before the frame does it
// returns a Torn *FrameError (offset 0; callers add their own). A seal marker
// yields errSealMarker.
func ParseFrame(anchor string, b []byte) (Record, int, error) {
	if len(b) < 4 {
		return Record{}, 0, &FrameError{Kind: Torn, Msg: fmt.Sprintf("%d bytes left, less than a frame length", len(b))}
	}
	bodyLen := be.Uint32(b)
	if bodyLen == sealMarker {
		return Record{}, 0, errSealMarker
	}
	if bodyLen > maxFrameBody || bodyLen > MaxFrameBody {
		return Record{}, 0, &FrameError{Kind: Corrupt, Code: errs.CodeHashMismatch, Msg: fmt.Sprintf("frame length %d exceeds the format maximum", bodyLen)}
	}
	n := 4 + int(bodyLen) + HashSize
	if len(b) < n {
		return Record{}, 0, &FrameError{Kind: Torn, Msg: fmt.Sprintf("frame of %d bytes, only %d present", n, len(b))}
	}
	body := b[4 : 4+bodyLen]
	r, err := DecodeBody(anchor, body)
	if err != nil {
		return r, 0, &FrameError{Kind: Corrupt, Code: errs.CodeHashMismatch, Seq: r.Seq, Msg: err.Error()}
	}
	copy(r.Hash[:], b[4+bodyLen:n])
	if got := HashBody(anchor, body); got != r.Hash {
		return r, 0, &FrameError{Kind: Corrupt, Code: errs.CodeHashMismatch, Seq: r.Seq,
			Msg: fmt.Sprintf("record seq %d: stored hash %s, content hashes to %s", r.Seq, r.Hash, got)}
	}
	return r, n, nil
}

var errSealMarker = fmt.Errorf("seal marker")

// FileName is the name of segment number segno inside its anchor directory.
func FileName(segno uint64) string { return fmt.Sprintf("%016x.seg", segno) }

// ParseFileName returns the segment number of a segment file name.
func ParseFileName(name string) (uint64, bool) {
	var segno uint64
	if len(name) != 20 || name[16:] != ".seg" {
		return 0, false
	}
	if _, err := fmt.Sscanf(name[:16], "%016x", &segno); err != nil || segno == 0 || FileName(segno) != name {
		return 0, false
	}
	return segno, true
}

// AnchorsDir is the directory under the database root that holds every
// anchor's segments.
const AnchorsDir = "anchors"

// AnchorDir returns the directory of an anchor under root:
// root/anchors/<2 hex>/<30 hex>, from AnchorPathID. The two-level fan-out
// keeps directories small with 100,000 anchors.
func AnchorDir(fs vfs.FS, root, anchor string) string {
	id := AnchorPathID(anchor)
	return fs.PathJoin(root, AnchorsDir, id[:2], id[2:])
}

// ReadSeal reads a sealed segment's header and seal without scanning its
// frames: the planner needs them for segments of up to 64 MiB each. It
// checks both checksums, not the records.
func ReadSeal(r io.ReaderAt, size int64) (Header, Footer, error) {
	hb := make([]byte, min(size, int64(headerFixed+MaxAnchorID)))
	if _, err := r.ReadAt(hb, 0); err != nil && !errors.Is(err, io.EOF) {
		return Header{}, Footer{}, err
	}
	h, hsize, err := ParseHeader(hb)
	if err != nil {
		return h, Footer{}, err
	}
	if size < int64(hsize)+FooterSize {
		return h, Footer{}, &FrameError{Kind: Corrupt, Code: errs.CodeChainBroken, Offset: size, Msg: "segment too short to be sealed"}
	}
	fb := make([]byte, FooterSize)
	if _, err := r.ReadAt(fb, size-FooterSize); err != nil && !errors.Is(err, io.EOF) {
		return h, Footer{}, err
	}
	if be.Uint32(fb) != sealMarker {
		return h, Footer{}, &FrameError{Kind: Corrupt, Code: errs.CodeChainBroken, Offset: size - FooterSize, Msg: "segment is not sealed"}
	}
	f, err := parseFooter(fb, h.Checksum)
	if err != nil {
		return h, f, &FrameError{Kind: Corrupt, Code: errs.CodeHashMismatch, Offset: size - FooterSize, Msg: err.Error()}
	}
	if f.Count == 0 || f.LastSeq != h.FirstSeq+f.Count-1 {
		return h, f, &FrameError{Kind: Corrupt, Code: errs.CodeChainBroken, Offset: size - FooterSize, Msg: "seal count does not match its seqs"}
	}
	return h, f, nil
}

// DecodeFrame parses one frame like ParseFrame but does not check its hash:
// the stored hash is returned as Record.Hash. It is for rebuilding an index
// from segments already verified (a snapshot-based rebuild); everything else
// uses ParseFrame.
func DecodeFrame(anchor string, b []byte) (Record, int, error) {
	if len(b) < 4 {
		return Record{}, 0, &FrameError{Kind: Torn, Msg: fmt.Sprintf("%d bytes left, less than a frame length", len(b))}
	}
	bodyLen := be.Uint32(b)
	if bodyLen == sealMarker {
		return Record{}, 0, errSealMarker
	}
	if bodyLen > maxFrameBody || bodyLen > MaxFrameBody {
		return Record{}, 0, &FrameError{Kind: Corrupt, Code: errs.CodeHashMismatch, Msg: fmt.Sprintf("frame length %d exceeds the format maximum", bodyLen)}
	}
	n := 4 + int(bodyLen) + HashSize
	if len(b) < n {
		return Record{}, 0, &FrameError{Kind: Torn, Msg: fmt.Sprintf("frame of %d bytes, only %d present", n, len(b))}
	}
	r, err := DecodeBody(anchor, b[4:4+bodyLen])
	if err != nil {
		return r, 0, &FrameError{Kind: Corrupt, Code: errs.CodeHashMismatch, Seq: r.Seq, Msg: err.Error()}
	}
	copy(r.Hash[:], b[4+bodyLen:n])
	return r, n, nil
}

// IsSealMarker reports whether err is what ParseFrame and DecodeFrame return
// at a seal.
func IsSealMarker(err error) bool { return errors.Is(err, errSealMarker) }
