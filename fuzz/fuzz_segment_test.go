package fuzz

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
)

// Fuzz targets for the segment package: the canonical record encoding, frames
// and the Scanner that recovery, verification and index rebuilds all use.
// Oracles: never panic, never hang, and whatever is accepted re-encodes to
// exactly the bytes it was read from (so its hash covers what was stored).

// --- fixtures -----------------------------------------------------------------

func record(anchor string, seq uint64, prev segment.Hash) segment.Record {
	r := segment.Record{Anchor: anchor, Seq: seq, Counter: seq * 3, Time: int64(seq) * 1e9, PrevHash: prev}
	switch seq % 3 {
	case 1:
		r.Type, r.Key, r.Value, r.IdempotencyKey = segment.TypePut, []byte(fmt.Sprint("k", seq)), []byte(fmt.Sprint("v", seq)), []byte("i")
	case 2:
		r.Type, r.Key = segment.TypeDelete, []byte(fmt.Sprint("k", seq-1))
	default:
		r.Type, r.Value = "TELEMETRY_UPDATE", []byte(`{"t":1}`)
	}
	return r
}

// segmentFile returns a segment of n records of the anchor, sealed if asked.
func segmentFile(anchor string, n int, seal bool) []byte {
	h := segment.Header{Anchor: anchor, Segno: 1, FirstSeq: 1, PrevHash: segment.GenesisHash(anchor)}
	b := segment.AppendHeader(nil, &h)
	prev := h.PrevHash
	for seq := uint64(1); seq <= uint64(n); seq++ {
		r := record(anchor, seq, prev)
		b = segment.AppendFrame(b, &r)
		prev = r.Hash
	}
	if seal {
		f := segment.Footer{LastSeq: uint64(n), Count: uint64(n), LastHash: prev}
		b = segment.AppendFooter(b, &f, h.Checksum)
	}
	return b
}

func frameOf(r segment.Record) []byte { return segment.AppendFrame(nil, &r) }

func canonicalOf(r segment.Record) []byte { return segment.AppendCanonical(nil, &r) }

func sameRecord(a, b segment.Record) bool {
	return a.Anchor == b.Anchor && a.Seq == b.Seq && a.Counter == b.Counter && a.Time == b.Time &&
		a.Type == b.Type && bytes.Equal(a.Key, b.Key) && bytes.Equal(a.Value, b.Value) &&
		bytes.Equal(a.IdempotencyKey, b.IdempotencyKey) && a.PrevHash == b.PrevHash && a.Hash == b.Hash
}

// --- FuzzDecodeCanonical --------------------------------------------------------

func FuzzDecodeCanonical(f *testing.F) {
	g := segment.GenesisHash("a")
	for seq := uint64(1); seq <= 3; seq++ {
		f.Add(canonicalOf(record("a", seq, g)))
	}
	f.Add(canonicalOf(record("Ünïcode/../x", 1<<40, g)))
	good := canonicalOf(record("a", 1, g))
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{1, 0})
	f.Add(append([]byte{2}, good[1:]...))  // version
	f.Add(good[:len(good)-1])              // short
	f.Add(append(bytes.Clone(good), 0))    // trailing
	f.Add(bytes.Repeat([]byte{0xFF}, 120)) // lengths past the end
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := segment.DecodeCanonical(b)
		if err != nil {
			if errs.CodeOf(err) != errs.CodeInvalidInput {
				t.Fatalf("refusal %v has code %q, want INPUT_001", err, errs.CodeOf(err))
			}
			return
		}
		again := segment.AppendCanonical(nil, &r)
		if !bytes.Equal(again, b) {
			t.Fatalf("decoded %+v re-encodes to\n%x\nnot\n%x", r, again, b)
		}
		if err := segment.ValidateAnchorID(r.Anchor); err != nil {
			t.Fatalf("decoded an invalid anchor id: %v", err)
		}
		if err := segment.ValidateType(r.Type); err != nil {
			t.Fatalf("decoded an invalid type: %v", err)
		}
		if r.Seq == 0 || (r.IsKV() && len(r.Key) == 0) {
			t.Fatalf("decoded an impossible record: %+v", r)
		}
		// The record hash is the hash of exactly these bytes.
		body := b[2+len(r.Anchor):]
		if r.ComputeHash() != segment.HashBody(r.Anchor, body) {
			t.Fatal("ComputeHash differs from HashBody over the decoded bytes")
		}
		// DecodeBody of the body alone agrees.
		r2, err := segment.DecodeBody(r.Anchor, body)
		if err != nil || !sameRecord(r, r2) {
			t.Fatalf("DecodeBody disagrees: %v", err)
		}
	})
}

// --- FuzzParseFrame -------------------------------------------------------------

func FuzzParseFrame(f *testing.F) {
	g := segment.GenesisHash("a")
	for seq := uint64(1); seq <= 3; seq++ {
		fr := frameOf(record("a", seq, g))
		f.Add("a", fr)
		f.Add("b", fr) // another anchor's frame
		f.Add("a", fr[:len(fr)-1])
		f.Add("a", append(bytes.Clone(fr), fr...))
	}
	f.Add("a", []byte{})
	f.Add("a", []byte{0xFF, 0xFF, 0xFF, 0xFF}) // seal marker
	f.Add("a", []byte{0x7F, 0xFF, 0xFF, 0xFE})
	f.Add("a", []byte{0, 0, 0, 0})
	f.Add("../x", frameOf(record("../x", 7, g)))
	f.Fuzz(func(t *testing.T, anchor string, b []byte) {
		if len(anchor) > segment.MaxAnchorID {
			return // anchors come from validated headers
		}
		r, n, err := segment.ParseFrame(anchor, b)
		if err != nil {
			var fe *segment.FrameError
			if !errors.As(err, &fe) {
				if len(b) >= 4 && bytes.Equal(b[:4], []byte{0xFF, 0xFF, 0xFF, 0xFF}) {
					return // the seal marker
				}
				t.Fatalf("error %v (%T) is not a *FrameError", err, err)
			}
			if n != 0 {
				t.Fatalf("n = %d with an error", n)
			}
			if fe.Kind == segment.Torn {
				if len(b) >= 4 && int(uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3]))+4+segment.HashSize <= len(b) {
					t.Fatalf("Torn although the whole frame is present: %v", err)
				}
			}
			return
		}
		if n <= 0 || n > len(b) {
			t.Fatalf("n = %d of %d bytes", n, len(b))
		}
		if r.Anchor != anchor {
			t.Fatalf("anchor %q, want %q", r.Anchor, anchor)
		}
		c := r.Clone()
		again := segment.AppendFrame(nil, &c)
		if !bytes.Equal(again, b[:n]) {
			t.Fatalf("accepted frame re-encodes differently:\n%x\n%x", again, b[:n])
		}
		if c.Hash != r.Hash || segment.HashBody(anchor, b[4:n-segment.HashSize]) != r.Hash {
			t.Fatal("accepted frame's hash does not verify")
		}
		if r.FrameSize() != n {
			t.Fatalf("FrameSize %d, parsed %d", r.FrameSize(), n)
		}
		// Any proper prefix is Torn.
		if _, _, err := segment.ParseFrame(anchor, b[:n-1]); err == nil {
			t.Fatal("a proper prefix of an accepted frame was accepted")
		}
		// The same bytes belong to no other anchor.
		if other := anchor + "x"; len(other) <= segment.MaxAnchorID {
			if _, _, err := segment.ParseFrame(other, b); err == nil {
				t.Fatalf("frame accepted for both %q and %q", anchor, other)
			}
		}
	})
}

// --- FuzzScanner ------------------------------------------------------------------

// checkScan scans data as a segment file and checks the Scanner's invariants.
// It returns the number of frames read.
func checkScan(t *testing.T, data []byte) int {
	t.Helper()
	size := int64(len(data))
	sc, err := segment.NewScanner(bytes.NewReader(data), size)
	if err != nil {
		var fe *segment.FrameError
		if !errors.As(err, &fe) {
			t.Fatalf("NewScanner: %v (%T) is not a *FrameError", err, err)
		}
		return 0
	}
	if sc.HeaderSize <= 0 || int64(sc.HeaderSize) > size || sc.HeaderSize != segment.HeaderSize(sc.Header.Anchor) {
		t.Fatalf("HeaderSize %d in a %d-byte file", sc.HeaderSize, size)
	}
	if err := segment.ValidateAnchorID(sc.Header.Anchor); err != nil {
		t.Fatalf("header with an invalid anchor accepted: %v", err)
	}
	end := int64(sc.HeaderSize)
	nextSeq, prev := sc.Header.FirstSeq, sc.Header.PrevHash
	frames := 0
	// A frame is at least 4 + fixed body + hash bytes, so a scan that makes
	// more calls than this is looping.
	limit := len(data)/64 + 3
	for calls := 0; ; calls++ {
		if calls > limit {
			t.Fatalf("scanner still returning frames after %d calls on %d bytes", calls, len(data))
		}
		fr, err := sc.Next()
		if errors.Is(err, io.EOF) {
			if sc.Offset() != size {
				t.Fatalf("clean end at offset %d of %d", sc.Offset(), size)
			}
			if ft := sc.Footer(); ft != nil && (ft.Count != uint64(frames) || ft.Count == 0 || ft.LastHash != prev || ft.LastSeq != nextSeq-1) {
				t.Fatalf("accepted seal %+v after %d frames", ft, frames)
			}
			break
		}
		if err != nil {
			var fe *segment.FrameError
			if !errors.As(err, &fe) {
				t.Fatalf("Next: %v (%T) is not a *FrameError", err, err)
			}
			if fe.Offset != end && fe.Offset != end+segment.FooterSize {
				t.Fatalf("error at offset %d, last good frame ends at %d: %v", fe.Offset, end, err)
			}
			if fe.Offset > size {
				t.Fatalf("error offset %d past the file (%d)", fe.Offset, size)
			}
			if fe.Kind != segment.Torn && fe.Kind != segment.Corrupt {
				t.Fatalf("error kind %d", fe.Kind)
			}
			if _, again := sc.Next(); again != err {
				t.Fatalf("error not sticky: %v then %v", err, again)
			}
			break
		}
		if fr.Offset != end || fr.Size <= 0 || fr.Offset+int64(fr.Size) > size {
			t.Fatalf("frame at %d size %d; expected it at %d in a %d-byte file", fr.Offset, fr.Size, end, size)
		}
		if fr.Record.Seq != nextSeq || fr.Record.PrevHash != prev || fr.Record.Anchor != sc.Header.Anchor {
			t.Fatalf("frame seq %d prev %s anchor %q; want seq %d prev %s", fr.Record.Seq, fr.Record.PrevHash, fr.Record.Anchor, nextSeq, prev)
		}
		c := fr.Record.Clone()
		if again := segment.AppendFrame(nil, &c); !bytes.Equal(again, data[fr.Offset:fr.Offset+int64(fr.Size)]) || c.Hash != fr.Record.Hash {
			t.Fatalf("frame at %d re-encodes differently", fr.Offset)
		}
		end += int64(fr.Size)
		nextSeq, prev = fr.Record.Seq+1, fr.Record.Hash
		frames++
		if sc.Count() != uint64(frames) || sc.NextSeq() != nextSeq || sc.HeadHash() != prev || sc.Offset() != end {
			t.Fatalf("scanner state Count %d NextSeq %d Offset %d disagrees with the frames read", sc.Count(), sc.NextSeq(), sc.Offset())
		}
	}
	return frames
}

func FuzzScanner(f *testing.F) {
	for _, n := range []int{0, 1, 2, 5} {
		f.Add(segmentFile("a", n, false))
		if n > 0 {
			f.Add(segmentFile("a", n, true))
		}
	}
	full := segmentFile("Ünïcode", 3, true)
	f.Add(full)
	f.Add(full[:len(full)-1])   // torn seal
	f.Add(full[:len(full)-100]) // torn frame
	f.Add(append(bytes.Clone(full), 0))
	f.Add([]byte{})
	f.Add([]byte("ANCHSEG\n"))
	f.Add(bytes.Repeat([]byte{0xFF}, 200))
	f.Add(append(segmentFile("a", 2, false), 0, 0x10, 0, 0)) // a frame over scanLimit
	f.Fuzz(func(t *testing.T, data []byte) {
		checkScan(t, data)
		checkScanLimited(t, data)
	})
}

// FuzzScannerFrames gives the fuzzer everything after a valid header, so it is
// not stopped by the header checksum. With fixHashes set, the target first
// rewrites every frame's hash and every seal's checksum to match, so that the
// fuzzer gets past the hash checks and explores decoding, the chain rules and
// the seal rules.
func FuzzScannerFrames(f *testing.F) {
	seg := segmentFile("a", 4, true)
	hdrSize := segment.HeaderSize("a")
	f.Add(seg[hdrSize:], false)
	f.Add(seg[hdrSize:], true)
	f.Add(segmentFile("a", 1, false)[hdrSize:], true)
	f.Add([]byte{}, false)
	f.Add([]byte{0xFF, 0xFF, 0xFF, 0xFF}, true)
	f.Add(bytes.Repeat([]byte{0}, 120), true)
	// A frame over scanLimit, whole and cut short.
	over := segment.Record{Anchor: "a", Seq: 1, Counter: 1, Type: segment.TypePut, Key: []byte("k"), Value: bytes.Repeat([]byte("v"), 200), PrevHash: segment.GenesisHash("a")}
	f.Add(frameOf(over), false)
	f.Add(frameOf(over)[:100], false)
	f.Fuzz(func(t *testing.T, tail []byte, fixHashes bool) {
		h := segment.Header{Anchor: "a", Segno: 1, FirstSeq: 1, PrevHash: segment.GenesisHash("a")}
		data := segment.AppendHeader(nil, &h)
		start := len(data)
		data = append(data, tail...)
		if fixHashes {
			fixup(data, start, h)
		}
		checkScan(t, data)
		checkScanLimited(t, data)
	})
}

// fixup rewrites, in place, the hash of every length-delimited frame and the
// checksum of every seal from start on.
func fixup(data []byte, off int, h segment.Header) {
	for off+4 <= len(data) {
		l := uint32(data[off])<<24 | uint32(data[off+1])<<16 | uint32(data[off+2])<<8 | uint32(data[off+3])
		if l == 0xFFFFFFFF {
			if off+segment.FooterSize > len(data) {
				return
			}
			var ft segment.Footer
			p := data[off+4:]
			for i := 0; i < 8; i++ {
				ft.LastSeq = ft.LastSeq<<8 | uint64(p[i])
				ft.Count = ft.Count<<8 | uint64(p[8+i])
			}
			copy(ft.LastHash[:], p[16:])
			sealed := segment.AppendFooter(nil, &ft, h.Checksum)
			copy(data[off:], sealed)
			off += segment.FooterSize
			continue
		}
		n := 4 + int(l) + segment.HashSize
		if l > 1<<24 || off+n > len(data) {
			return
		}
		sum := segment.HashBody(h.Anchor, data[off+4:off+4+int(l)])
		copy(data[off+4+int(l):], sum[:])
		off += n
	}
}

// --- FuzzRecordRoundTrip -----------------------------------------------------------

func FuzzRecordRoundTrip(f *testing.F) {
	f.Add("a", uint64(1), uint64(1), int64(0), "put", []byte("k"), []byte("v"), []byte(nil), []byte(nil))
	f.Add("../x", uint64(7), uint64(1<<63), int64(-1), "delete", []byte("k"), []byte(nil), []byte("idem"), bytes.Repeat([]byte{1}, 32))
	f.Add("Ünïcode", uint64(1<<62), uint64(0), int64(1<<62), "TELEMETRY_UPDATE", []byte(nil), []byte(`{"x":1}`), []byte(nil), []byte("short prev"))
	f.Add("user@host", uint64(2), uint64(3), int64(4), "PUT", []byte(nil), []byte(nil), []byte(nil), []byte(nil))
	f.Add("", uint64(0), uint64(0), int64(0), "", []byte(nil), []byte(nil), []byte(nil), []byte(nil))        // invalid
	f.Add("a\n", uint64(1), uint64(0), int64(0), "put", []byte("k"), []byte(nil), []byte(nil), []byte(nil))  // invalid
	f.Add("a", uint64(1), uint64(0), int64(0), "delete", []byte("k"), []byte("v"), []byte(nil), []byte(nil)) // invalid
	f.Fuzz(func(t *testing.T, anchor string, seq, counter uint64, tm int64, typ string, key, value, idem, prev []byte) {
		r := segment.Record{Anchor: anchor, Seq: seq, Counter: counter, Time: tm, Type: typ,
			Key: key, Value: value, IdempotencyKey: idem}
		copy(r.PrevHash[:], prev)
		if seq == 1 {
			// A first segment must link to the genesis hash.
			r.PrevHash = segment.GenesisHash(anchor)
		}
		// Validation never panics; what it refuses is INPUT_001.
		if err := segment.ValidateContent(anchor, typ, key, value, idem, segment.DefaultLimits()); err != nil {
			if errs.CodeOf(err) != errs.CodeInvalidInput {
				t.Fatalf("refusal %v has code %q, want INPUT_001", err, errs.CodeOf(err))
			}
			return
		}
		if seq == 0 {
			return
		}
		canon := segment.AppendCanonical(nil, &r)
		d, err := segment.DecodeCanonical(canon)
		if err != nil {
			t.Fatalf("a valid record does not decode: %v", err)
		}
		if !sameRecord(d, r) {
			t.Fatalf("decoded %+v, encoded %+v", d, r)
		}
		if again := segment.AppendCanonical(nil, &d); !bytes.Equal(again, canon) {
			t.Fatal("re-encoding differs")
		}
		w := r.Clone()
		fr := segment.AppendFrame(nil, &w)
		p, n, err := segment.ParseFrame(anchor, fr)
		if err != nil || n != len(fr) || !sameRecord(p, w) || w.Hash != r.ComputeHash() {
			t.Fatalf("frame round trip: %v n=%d/%d", err, n, len(fr))
		}
		// One record, one segment, sealed: scans clean.
		h := segment.Header{Anchor: anchor, Segno: 1, FirstSeq: seq, PrevHash: r.PrevHash}
		file := segment.AppendHeader(nil, &h)
		file = append(file, fr...)
		ft := segment.Footer{LastSeq: seq, Count: 1, LastHash: w.Hash}
		file = segment.AppendFooter(file, &ft, h.Checksum)
		if got := checkScan(t, file); got != 1 {
			t.Fatalf("one-record segment scanned %d frames", got)
		}
	})
}
