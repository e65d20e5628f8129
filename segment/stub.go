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
//	+----------+---------+-----------+--------+-------+-----------+-------+-----------+--------------+----------+
//	| magic    | version | anchorLen | anchor | segno | first seq | count | prev hash | last counter | hashes   |
//	| 8 bytes  | u8 = 1  | u8        |        | u64   | u64       | u64   | 32 bytes  | u64          | count×32 |
//	+----------+---------+-----------+--------+-------+-----------+-------+-----------+--------------+----------+
//	+-------------+
//	| counters    |
//	| count × u64 |
//	+-------------+
//	+------------+--------------+-------------+-----------------+----------+
//	| kept count | kept frames  | idem count  | idem entries    | checksum |
//	| u32        | frames (§3)  | u32         | see below       | 32 bytes |
//	+------------+--------------+-------------+-----------------+----------+
//
// What a rebuilt index needs beyond the removed records' hashes:
//
//   - Counters: each record's counter, strictly increasing, the last equal
//     to last counter — the merged order needs them.
//   - Kept: the whole frames of each key's last record in the segment (a
//     put, or a delete that keeps an older put from coming back), which the
//     state at any frontier at or above the cut needs. (Stubs written before
//     688b54a, 2026-11-25, kept only records that were their key's newest
//     version overall; they read the same way.) Each must hash to its
//     seq's entry in hashes, so a stub cannot smuggle in a record.
//   - Idem: every idempotency key of the removed records — seq u64, counter
//     u64, fingerprint 32 bytes, key length u16, key — since a key once used
//     is never freed (CONTRACT §7). Its seq must be in the stub; the receipt's
//     hash is the one in hashes.
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
	Hashes      []Hash   // record hashes, seq FirstSeq onwards
	Counters    []uint64 // record counters, seq FirstSeq onwards
	Kept        []Record
	Idem        []StubIdem
}

// StubIdem is an idempotency key of a removed record.
type StubIdem struct {
	Seq         uint64
	Counter     uint64
	Fingerprint Hash
	Key         []byte
}

// HashAt returns the hash of record seq, which must be in the stub.
func (s *Stub) HashAt(seq uint64) Hash { return s.Hashes[seq-s.FirstSeq] }

func (s *Stub) holds(seq uint64) bool { return seq >= s.FirstSeq && seq <= s.LastSeq() }

// LastSeq is the seq of the stub's last record.
func (s *Stub) LastSeq() uint64 { return s.FirstSeq + uint64(len(s.Hashes)) - 1 }

// LastHash is the hash of the stub's last record.
func (s *Stub) LastHash() Hash { return s.Hashes[len(s.Hashes)-1] }

// AppendStub appends the encoding of s to dst, with its checksum. It does
// not validate s: the engine builds stubs from a segment it has just read
// and checked, and ParseStub refuses any that break the rules.
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
	for _, c := range s.Counters {
		dst = be.AppendUint64(dst, c)
	}
	dst = be.AppendUint32(dst, uint32(len(s.Kept)))
	for i := range s.Kept {
		dst = AppendFrame(dst, &s.Kept[i])
	}
	dst = be.AppendUint32(dst, uint32(len(s.Idem)))
	for _, e := range s.Idem {
		dst = be.AppendUint64(dst, e.Seq)
		dst = be.AppendUint64(dst, e.Counter)
		dst = append(dst, e.Fingerprint[:]...)
		dst = be.AppendUint16(dst, uint16(len(e.Key)))
		dst = append(dst, e.Key...)
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
	end := len(b) - HashSize
	if count == 0 || count > uint64(end-p)/(HashSize+8) {
		return bad("count %d does not fit in its %d bytes", count, end-p)
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
	p += int(count) * HashSize
	s.Counters = make([]uint64, count)
	for i := range s.Counters {
		s.Counters[i] = be.Uint64(b[p+8*i:])
		if i > 0 && s.Counters[i] <= s.Counters[i-1] || s.Counters[i] == 0 {
			return bad("counter of seq %d (%d) does not increase", s.FirstSeq+uint64(i), s.Counters[i])
		}
	}
	if s.Counters[count-1] != s.LastCounter {
		return bad("last counter %d, but its last record's is %d", s.LastCounter, s.Counters[count-1])
	}
	p += int(count) * 8
	u32 := func() (int, bool) {
		if end-p < 4 {
			return 0, false
		}
		n := int(be.Uint32(b[p:]))
		p += 4
		return n, true
	}
	kept, ok := u32()
	if !ok {
		return bad("truncated before its kept records")
	}
	last := uint64(0)
	for i := 0; i < kept; i++ {
		rec, n, err := ParseFrame(s.Anchor, b[p:end])
		if err != nil {
			return bad("kept record %d: %v", i, err)
		}
		if !s.holds(rec.Seq) || rec.Seq <= last {
			return bad("kept record seq %d is not in the stub or out of order", rec.Seq)
		}
		if rec.Hash != s.HashAt(rec.Seq) || rec.Counter != s.Counters[rec.Seq-s.FirstSeq] {
			return bad("kept record seq %d hashes to %s; the chain has %s", rec.Seq, rec.Hash, s.HashAt(rec.Seq))
		}
		last = rec.Seq
		s.Kept = append(s.Kept, rec)
		p += n
	}
	idem, ok := u32()
	if !ok {
		return bad("truncated before its idempotency keys")
	}
	for i := 0; i < idem; i++ {
		if end-p < 8+8+HashSize+2 {
			return bad("idempotency entry %d is cut short", i)
		}
		e := StubIdem{Seq: be.Uint64(b[p:]), Counter: be.Uint64(b[p+8:])}
		copy(e.Fingerprint[:], b[p+16:])
		kl := int(be.Uint16(b[p+16+HashSize:]))
		p += 16 + HashSize + 2
		if kl == 0 || kl > MaxFormatIdemKey || end-p < kl {
			return bad("idempotency entry %d: key of %d bytes", i, kl)
		}
		if !s.holds(e.Seq) || e.Counter != s.Counters[e.Seq-s.FirstSeq] {
			return bad("idempotency entry %d names seq %d counter %d, not in the stub", i, e.Seq, e.Counter)
		}
		e.Key = append([]byte(nil), b[p:p+kl]...)
		p += kl
		s.Idem = append(s.Idem, e)
	}
	if p != end {
		return bad("%d bytes after its idempotency keys", end-p)
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
