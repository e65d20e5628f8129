package snapshot

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/zeebo/blake3"
)

// BLAKE3 derive-key contexts of this package, in the family of segment's
// (segment.ContextRecord and the rest): no two kinds of hash can collide.
const (
	ContextState     = "anchordb 2026-11 state v1"
	ContextHeader    = "anchordb 2026-11 snapshot header v1"
	ContextFooter    = "anchordb 2026-11 snapshot footer v1"
	ContextFile      = "anchordb 2026-11 snapshot file v1"
	ContextAuditLine = "anchordb 2026-11 audit line v1"
)

// Magic opens every snapshot file.
var Magic = [8]byte{'A', 'N', 'C', 'H', 'S', 'N', 'A', 'P'}

const (
	// FormatVersion is the version byte of snapshot files.
	FormatVersion = 1
	// compressionZstd is the only compression byte defined.
	compressionZstd = 1

	// DirName is the directory under the database root that holds snapshots.
	DirName = "snapshots"
	// Ext ends every snapshot file name.
	Ext = ".snap"
	// TempExt is added to a snapshot's name while it is written; a file
	// with it is a crash leftover (CleanTemp removes them), never a snapshot.
	TempExt = ".tmp"

	hashSize        = segment.HashSize
	headerFixed     = 58 // through the anchor count
	headerMin       = headerFixed + hashSize
	frontierFixed   = 1 + 8 + hashSize // per entry, besides the anchor id
	footerSize      = 8 + 8 + 8 + 3*hashSize
	entryFixed      = 4 + 4 + 4 + 8 + 8 + 8 + hashSize
	footerChecked   = 8 + 8 + 8 + hashSize // bytes the footer checksum covers
	maxHeaderLength = 1<<32 - 1
)

var be = binary.BigEndian

// Head is an anchor's place in a snapshot's frontier: the seq of its last
// record inside the snapshot and that record's hash.
type Head struct {
	Seq  uint64       `json:"seq"`
	Hash segment.Hash `json:"hash"`
}

// Frontier is a snapshot's frontier: anchor id → head. Every seq is >= 1.
type Frontier map[string]Head

// Seqs returns the frontier as anchor → seq, the shape of merge.Frontier.
func (f Frontier) Seqs() map[string]uint64 {
	out := make(map[string]uint64, len(f))
	for a, h := range f {
		out[a] = h.Seq
	}
	return out
}

// Records returns how many records the frontier covers: the sum of its
// seqs.
func (f Frontier) Records() uint64 {
	var n uint64
	for _, h := range f {
		n += h.Seq
	}
	return n
}

// Validate checks anchor ids and that every seq is at least 1.
func (f Frontier) Validate() error {
	for a, h := range f {
		if err := segment.ValidateAnchorID(a); err != nil {
			return fmt.Errorf("snapshot frontier: %w", err)
		}
		if h.Seq == 0 {
			return errs.New(errs.CodeInvalidInput, "snapshot frontier: anchor %q has seq 0 (leave out anchors without records)", a)
		}
	}
	return nil
}

// Version identifies the record that set a value: its receipt, plus time.
type Version struct {
	Anchor  string       `json:"anchor"`
	Seq     uint64       `json:"seq"`
	Counter uint64       `json:"counter"`
	Time    int64        `json:"time"` // Unix nanoseconds
	Hash    segment.Hash `json:"hash"`
}

// Entry is one key of the state with its value and version.
type Entry struct {
	Key     []byte
	Value   []byte
	Version Version
}

// Clone returns a copy whose slices alias nothing.
func (e Entry) Clone() Entry {
	e.Key = append([]byte(nil), e.Key...)
	e.Value = append([]byte(nil), e.Value...)
	return e
}

// FileName returns the final name of a snapshot created at created whose file
// hash is fileHash.
func FileName(created time.Time, fileHash segment.Hash) string {
	return fmt.Sprintf("snapshot-%020d-%x%s", created.UnixNano(), fileHash[:8], Ext)
}

// parseFileName returns the creation time encoded in a snapshot name.
func parseFileName(name string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(name, "snapshot-")
	if !ok || !strings.HasSuffix(rest, Ext) || len(rest) != 20+1+16+len(Ext) || rest[20] != '-' {
		return time.Time{}, false
	}
	ns, err := strconv.ParseInt(rest[:20], 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, ns).UTC(), true
}

// header is the decoded header.
type header struct {
	length    int
	created   time.Time
	policyRef segment.Hash
	anchors   []string // frontier anchors in file order: anchorIdx → id
	frontier  Frontier
	checksum  segment.Hash
}

// appendHeader encodes the header; anchors must be f's ids sorted by bytes.
func appendHeader(dst []byte, created time.Time, policyRef segment.Hash, anchors []string, f Frontier) ([]byte, segment.Hash) {
	start := len(dst)
	dst = append(dst, Magic[:]...)
	dst = append(dst, FormatVersion, compressionZstd)
	lenAt := len(dst)
	dst = be.AppendUint32(dst, 0) // patched below
	dst = be.AppendUint64(dst, uint64(created.UnixNano()))
	dst = append(dst, policyRef[:]...)
	dst = be.AppendUint32(dst, uint32(len(anchors)))
	for _, a := range anchors {
		h := f[a]
		dst = append(dst, byte(len(a)))
		dst = append(dst, a...)
		dst = be.AppendUint64(dst, h.Seq)
		dst = append(dst, h.Hash[:]...)
	}
	be.PutUint32(dst[lenAt:], uint32(len(dst)-start+hashSize))
	var sum segment.Hash
	blake3.DeriveKey(ContextHeader, dst[start:], sum[:])
	return append(dst, sum[:]...), sum
}

// parseHeader decodes a whole header (b is exactly H bytes, H taken from the
// fixed part). The checksum is checked before the frontier is trusted.
func parseHeader(b []byte) (header, error) {
	var h header
	h.length = len(b)
	copy(h.checksum[:], b[len(b)-hashSize:])
	var want segment.Hash
	blake3.DeriveKey(ContextHeader, b[:len(b)-hashSize], want[:])
	if want != h.checksum {
		return h, fmt.Errorf("header checksum mismatch")
	}
	h.created = time.Unix(0, int64(be.Uint64(b[14:]))).UTC()
	copy(h.policyRef[:], b[22:54])
	n := be.Uint32(b[54:])
	body := b[headerFixed : len(b)-hashSize]
	if uint64(n) > uint64(len(body))/(frontierFixed+1) {
		return h, fmt.Errorf("frontier of %s does not fit in %d bytes", plural(n, "anchor"), len(body))
	}
	h.anchors = make([]string, 0, n)
	h.frontier = make(Frontier, n)
	p := 0
	for i := uint32(0); i < n; i++ {
		if len(body)-p < 1 {
			return h, fmt.Errorf("frontier entry %d cut short", i)
		}
		aLen := int(body[p])
		p++
		if len(body)-p < aLen+8+hashSize {
			return h, fmt.Errorf("frontier entry %d cut short", i)
		}
		a := string(body[p : p+aLen])
		p += aLen
		var hd Head
		hd.Seq = be.Uint64(body[p:])
		copy(hd.Hash[:], body[p+8:])
		p += 8 + hashSize
		if err := segment.ValidateAnchorID(a); err != nil {
			return h, fmt.Errorf("frontier entry %d: %v", i, err)
		}
		if i > 0 && a <= h.anchors[i-1] {
			return h, fmt.Errorf("frontier anchor %q follows %q (must be strictly ascending)", a, h.anchors[i-1])
		}
		if hd.Seq == 0 {
			return h, fmt.Errorf("frontier anchor %q has seq 0", a)
		}
		h.anchors = append(h.anchors, a)
		h.frontier[a] = hd
	}
	if p != len(body) {
		return h, fmt.Errorf("%d bytes after the frontier", len(body)-p)
	}
	return h, nil
}

// footer is the decoded footer.
type footer struct {
	bodyLen   uint64
	entries   uint64
	rawSize   uint64
	stateHash segment.Hash
	fileHash  segment.Hash
}

// appendFooterChecked appends the checksummed part of the footer and its
// checksum (everything but the file hash).
func appendFooterChecked(dst []byte, f footer, headerChecksum segment.Hash) []byte {
	start := len(dst)
	dst = be.AppendUint64(dst, f.bodyLen)
	dst = be.AppendUint64(dst, f.entries)
	dst = be.AppendUint64(dst, f.rawSize)
	dst = append(dst, f.stateHash[:]...)
	return append(dst, footerChecksum(headerChecksum, dst[start:])...)
}

func footerChecksum(headerChecksum segment.Hash, checked []byte) []byte {
	h := blake3.NewDeriveKey(ContextFooter)
	_, _ = h.Write(headerChecksum[:])
	_, _ = h.Write(checked)
	return h.Sum(make([]byte, 0, hashSize))
}

// parseFooter decodes the footer (b is exactly footerSize bytes).
func parseFooter(b []byte, headerChecksum segment.Hash) (footer, error) {
	var f footer
	if string(footerChecksum(headerChecksum, b[:footerChecked])) != string(b[footerChecked:footerChecked+hashSize]) {
		return f, fmt.Errorf("footer checksum mismatch")
	}
	f.bodyLen = be.Uint64(b)
	f.entries = be.Uint64(b[8:])
	f.rawSize = be.Uint64(b[16:])
	copy(f.stateHash[:], b[24:])
	copy(f.fileHash[:], b[footerSize-hashSize:])
	return f, nil
}

// corrupt returns an INT_003 finding located in the file.
func corrupt(path string, off int64, format string, args ...any) *errs.Error {
	return errs.New(errs.CodeSnapshotCorrupted, "snapshot %s: %s", path, fmt.Sprintf(format, args...)).At("", 0, path, off)
}
