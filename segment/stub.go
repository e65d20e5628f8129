package segment

import (
	"bytes"
	"fmt"

	"github.com/anchordb/anchordb/internal/errs"
)

// A stub is what remains of a sealed segment after compaction removed it
// (raw_log "truncate"): the hashes of its records, so the chain and every
// Merkle proof above the cut stay verifiable, without the records.
//
//	+----------+---------+-----------+--------+-------+-----------+-------+-----------+--------------+----------+----------+
//	| magic    | version | anchorLen | anchor | segno | first seq | count | prev hash | last counter | hashes   | checksum |
//	| 8 bytes  | u8 = 1  | u8        |        | u64   | u64       | u64   | 32 bytes  | u64          | count×32 | 32 bytes |
//	+----------+---------+-----------+--------+-------+-----------+-------+-----------+--------------+----------+----------+
//
// The checksum is BLAKE3 derive-key(ContextStub) over every byte before it.
// Stub files are named like their segment with ".hashes" for ".seg".

// StubMagic opens every stub file.
var StubMagic = [8]byte{'A', 'N', 'C', 'H', 'S', 'T', 'U', 'B'}

// ContextStub is the derive-key context of stub checksums.
const ContextStub = "anchordb 2026-11 segment stub v1"

var stubHashers = newHasherPool(ContextStub)

// Stub is a parsed stub.
type Stub struct {
	Anchor      string
	Segno       uint64
	FirstSeq    uint64
	PrevHash    Hash // what record FirstSeq links to
	LastCounter uint64
	Hashes      []Hash // record hashes, seq FirstSeq onwards
}

// LastSeq is the seq of the stub's last record.
func (s *Stub) LastSeq() uint64 { return s.FirstSeq + uint64(len(s.Hashes)) - 1 }

// LastHash is the hash of the stub's last record.
func (s *Stub) LastHash() Hash { return s.Hashes[len(s.Hashes)-1] }

// AppendStub encodes s.
func AppendStub(dst []byte, s *Stub) []byte {
	start := len(dst)
	dst = append(dst, StubMagic[:]...)
	dst = append(dst, FormatVersion, byte(len(s.Anchor)))
	dst = append(dst, s.Anchor...)
	dst = be.AppendUint64(dst, s.Segno)
	dst = be.AppendUint64(dst, s.FirstSeq)
	dst = be.AppendUint64(dst, uint64(len(s.Hashes)))
	dst = append(dst, s.PrevHash[:]...)
	dst = be.AppendUint64(dst, s.LastCounter)
	for _, h := range s.Hashes {
		dst = append(dst, h[:]...)
	}
	sum := stubHashers.sum(dst[start:])
	return append(dst, sum[:]...)
}

// ParseStub decodes and checks a stub file. Anything wrong is INT_001.
func ParseStub(b []byte) (Stub, error) {
	var s Stub
	bad := func(format string, args ...any) (Stub, error) {
		return Stub{}, errs.New(errs.CodeHashMismatch, "segment stub: "+format, args...)
	}
	if len(b) < 10 || !bytes.Equal(b[:8], StubMagic[:]) {
		return bad("bad magic")
	}
	if b[8] != FormatVersion {
		return bad("version %d, want %d", b[8], FormatVersion)
	}
	aLen := int(b[9])
	fixed := 10 + aLen + 8 + 8 + 8 + HashSize + 8
	if len(b) < fixed+HashSize {
		return bad("%d bytes is too short", len(b))
	}
	if sum := stubHashers.sum(b[:len(b)-HashSize]); !bytes.Equal(sum[:], b[len(b)-HashSize:]) {
		return bad("checksum mismatch")
	}
	p := 10
	s.Anchor = string(b[p : p+aLen])
	p += aLen
	s.Segno = be.Uint64(b[p:])
	s.FirstSeq = be.Uint64(b[p+8:])
	count := be.Uint64(b[p+16:])
	copy(s.PrevHash[:], b[p+24:])
	s.LastCounter = be.Uint64(b[p+24+HashSize:])
	p = fixed
	if count == 0 || uint64(len(b)-HashSize-p) != count*HashSize {
		return bad("count %d does not match its %d bytes of hashes", count, len(b)-HashSize-p)
	}
	if err := ValidateAnchorID(s.Anchor); err != nil {
		return bad("%v", err)
	}
	if s.Segno == 0 || s.FirstSeq == 0 {
		return bad("segment number and first seq start at 1")
	}
	if s.FirstSeq == 1 && s.PrevHash != GenesisHash(s.Anchor) {
		return Stub{}, errs.New(errs.CodeChainBroken, "segment stub: the first segment does not link to the genesis hash")
	}
	s.Hashes = make([]Hash, count)
	for i := range s.Hashes {
		copy(s.Hashes[i][:], b[p+i*HashSize:])
	}
	return s, nil
}

// StubFileName is the name of the stub of segment segno.
func StubFileName(segno uint64) string { return fmt.Sprintf("%016x.hashes", segno) }

// ParseStubFileName returns the segment number of a stub file name.
func ParseStubFileName(name string) (uint64, bool) {
	if len(name) != 23 || name[16:] != ".hashes" {
		return 0, false
	}
	segno, ok := ParseFileName(name[:16] + ".seg")
	return segno, ok
}
