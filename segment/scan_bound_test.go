package segment

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
)

// sparseReaderAt is a file of size bytes that holds pieces at their offsets
// and zeros everywhere else, without holding the zeros: a segment far larger
// than the test's memory costs nothing, as a sparse file costs a hostile
// source nothing. It counts the bytes read.
type sparseReaderAt struct {
	size   int64
	pieces []sparsePiece
	read   *int64
}

type sparsePiece struct {
	off int64
	b   []byte
}

func (r sparseReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= r.size {
		return 0, io.EOF
	}
	n := int64(len(p))
	if off+n > r.size {
		n = r.size - off
	}
	clear(p[:n])
	for _, pc := range r.pieces {
		lo, hi := max(off, pc.off), min(off+n, pc.off+int64(len(pc.b)))
		if lo < hi {
			copy(p[lo-off:hi-off], pc.b[lo-pc.off:hi-pc.off])
		}
	}
	*r.read += n
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// allocated returns the bytes fn allocates.
func allocated(fn func()) uint64 {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestScannerMaxBodyRefusesUnread: with MaxBody set, a frame whose length
// declares a longer body is refused from the length alone — OverLimit,
// INPUT_001, at the frame's offset and expected seq — whether the file
// holds the whole declared frame or ends before it, and none of it is read
// (the scanner read every frame whole before, up to the format's 528 MiB).
// A frame of exactly MaxBody is read as usual.
func TestScannerMaxBodyRefusesUnread(t *testing.T) {
	seg := buildSegment(t, "a", 2, false)
	limit := max(seg.frames[0].rec.BodySize(), seg.frames[1].rec.BodySize())
	res := scanWith(bytes.NewReader(seg.data), int64(len(seg.data)), limit)
	if res.err != nil || len(res.frames) != 2 {
		t.Fatalf("frames at the limit: %d frames, %v", len(res.frames), res.err)
	}
	for _, declared := range []int64{int64(limit) + 1, 64 << 20, MaxFrameBody} {
		for _, whole := range []bool{true, false} {
			size := int64(len(seg.data)) + 4 + declared + HashSize
			if !whole {
				size = int64(len(seg.data)) + 4 + declared/2
			}
			var read int64
			r := sparseReaderAt{size: size, read: &read, pieces: []sparsePiece{
				{0, seg.data}, {int64(len(seg.data)), be.AppendUint32(nil, uint32(declared))}}}
			var got scanResult
			if n := allocated(func() { got = scanWith(r, size, limit) }); n > 4<<20 {
				t.Errorf("declared %d (whole %v): allocated %d bytes", declared, whole, n)
			}
			if read > 2<<20 {
				t.Errorf("declared %d (whole %v): read %d bytes", declared, whole, read)
			}
			fe := frameErr(t, got.err)
			if fe.Kind != OverLimit || fe.Code != errs.CodeInvalidInput || fe.Offset != int64(len(seg.data)) || fe.Seq != 3 || len(got.frames) != 2 {
				t.Fatalf("declared %d (whole %v): %d frames, %s %v", declared, whole, len(got.frames), kindName(fe.Kind), got.err)
			}
			if e := fe.AsError("a", "f"); e.Code != errs.CodeInvalidInput || !errors.Is(e, errs.ErrInvalidInput) {
				t.Fatalf("AsError: %v", e)
			}
		}
	}
	// Raising MaxBody after the finding reads the frame: nothing stuck.
	sc, err := NewScanner(bytes.NewReader(seg.data), int64(len(seg.data)))
	if err != nil {
		t.Fatal(err)
	}
	sc.MaxBody = seg.frames[0].rec.BodySize() - 1
	if _, err := sc.Next(); frameErr(t, err).Kind != OverLimit {
		t.Fatalf("frame 1 over MaxBody: %v", err)
	}
	sc.MaxBody = 0
	if fr, err := sc.Next(); err != nil || fr.Record.Seq != 1 {
		t.Fatalf("frame 1 after raising MaxBody: %v", err)
	}
	// Above the format maximum it is corrupt, whatever MaxBody says.
	b := append(bytes.Clone(seg.data), be.AppendUint32(nil, MaxFrameBody+1)...)
	if fe := frameErr(t, scanWith(bytes.NewReader(b), int64(len(b)), limit).err); fe.Kind != Corrupt {
		t.Fatalf("a length above the format: %s", kindName(fe.Kind))
	}
}

// scanWith scans like scanAll, with MaxBody set.
func scanWith(r io.ReaderAt, size int64, maxBody int) scanResult {
	var res scanResult
	sc, err := NewScanner(r, size)
	if err != nil {
		res.hdrErr = err
		return res
	}
	sc.MaxBody = maxBody
	for {
		f, err := sc.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				res.err = err
			}
			return res
		}
		res.frames = append(res.frames, f)
	}
}

// TestWholeRecordAfterBoundedMemory: recovery asks whether a whole record
// follows a failing frame anywhere in the rest of the segment. It reads a
// chunk at a time — the whole rest at once would cost 64 MiB for a 64 MiB
// segment, and more than any machine has for a 1 TiB one (Options.
// SegmentSize allows it) — and still finds a record far past the first
// chunk.
func TestWholeRecordAfterBoundedMemory(t *testing.T) {
	seg := buildSegment(t, "a", 3, false)
	bad := bytes.Clone(seg.data)
	bad[seg.frames[1].off+10] ^= 1 // frame 2 fails its hash
	const size = 64 << 20
	later := chainRecords("a", 2, seg.frames[0].rec.Hash, 3)[2] // seq 4: one a later one may hold
	var laterFrame []byte
	laterFrame = AppendFrame(laterFrame, &later)
	for _, tc := range []struct {
		name   string
		pieces []sparsePiece
		want   bool
	}{
		{"nothing follows", []sparsePiece{{0, bad[:seg.frames[2].off]}}, false},
		{"a record far on", []sparsePiece{{0, bad[:seg.frames[2].off]}, {size - 3<<20 - 7, laterFrame}}, true},
	} {
		var read int64
		r := sparseReaderAt{size: size, read: &read, pieces: tc.pieces}
		sc, err := NewScanner(r, size)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sc.Next(); err != nil {
			t.Fatal(err)
		}
		if _, err := sc.Next(); frameErr(t, err).Kind != Corrupt {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got bool
		if n := allocated(func() { got = sc.WholeRecordAfter() }); n > 4<<20 {
			t.Errorf("%s: WholeRecordAfter allocated %d bytes over a %d-byte segment", tc.name, n, size)
		}
		if got != tc.want {
			t.Fatalf("%s: WholeRecordAfter = %v", tc.name, got)
		}
	}
}

// TestValidFrameAfterMatchesWholeRead: reading the rest of the file a chunk
// at a time finds exactly what reading it whole found, on damaged segments
// larger than a chunk, from every kind of starting point.
func TestValidFrameAfterMatchesWholeRead(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	big := buildSegment(t, "a", 15_000, true) // ~1.5 MiB: past one probe chunk
	small := buildSegment(t, "a", 40, true)
	// A record longer than a probe chunk, after damage: found only if it
	// is read whole once its lengths tile.
	recs := chainRecords("a", 1, GenesisHash("a"), 4)
	recs[3].Type, recs[3].Key, recs[3].Value = TypePut, []byte("k"), bytes.Repeat([]byte("v"), 3<<20)
	recs[3].Hash = recs[3].ComputeHash()
	large := buildSegmentOpts(t, "a", segOpts{segno: 1, firstSeq: 1, records: recs})
	lb := bytes.Clone(large.data)
	lb[large.frames[1].off+4] ^= 1 // frame 2's seq: fails its hash
	sc, err := NewScanner(bytes.NewReader(lb), int64(len(lb)))
	if err != nil {
		t.Fatal(err)
	}
	sc.Resume(int64(large.frames[1].off), 2, large.frames[1].rec.PrevHash, 1)
	if off, ok := sc.validFrameAfter(int64(large.frames[1].off + 1)); !ok || off != int64(large.frames[2].off) {
		t.Fatalf("after damage: (%d, %v), want frame 3 at %d", off, ok, large.frames[2].off)
	}
	sc.Resume(int64(large.frames[2].off), 4, large.frames[2].rec.Hash, 2)
	if off, ok := sc.validFrameAfter(int64(large.frames[2].off + 1)); !ok || off != int64(large.frames[3].off) {
		t.Fatalf("a %d-byte record after damage: (%d, %v), want it at %d", large.frames[3].size, off, ok, large.frames[3].off)
	}
	for i := 0; i < 300; i++ {
		seg := small
		switch i % 10 {
		case 0:
			seg = big
		case 1:
			seg = large
		}
		b := bytes.Clone(seg.data)
		for n := rng.IntN(4); n > 0; n-- {
			b[seg.hdrSize+rng.IntN(len(b)-seg.hdrSize)] ^= byte(1 + rng.IntN(255))
		}
		sc, err := NewScanner(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		fr := seg.frames[rng.IntN(len(seg.frames))]
		sc.Resume(int64(fr.off), fr.rec.Seq, fr.rec.PrevHash, 0)
		from := int64(fr.off + rng.IntN(fr.size+200))
		gotOff, gotOK := sc.validFrameAfter(from)
		wantOff, wantOK := validFrameAfterWhole(sc, from)
		if gotOff != wantOff || gotOK != wantOK {
			t.Fatalf("case %d from %d: chunked (%d, %v), whole (%d, %v)", i, from, gotOff, gotOK, wantOff, wantOK)
		}
	}
}

// validFrameAfterWhole is validFrameAfter as it was, reading the rest of the
// file whole: the reference for the chunked one.
func validFrameAfterWhole(s *Scanner, from int64) (int64, bool) {
	if from >= s.size {
		return 0, false
	}
	tail := make([]byte, s.size-from)
	if n, err := s.r.ReadAt(tail, from); err != nil && n != len(tail) {
		return 0, false
	}
	for i := 0; i+4+bodyFixed+HashSize <= len(tail) || i+FooterSize <= len(tail); i++ {
		w := tail[i:]
		if len(w) >= FooterSize && be.Uint32(w) == sealMarker {
			if _, err := parseFooter(w[:FooterSize], s.Header.Checksum); err == nil {
				return from + int64(i), true
			}
			continue
		}
		if len(w) < 4+bodyFixed+HashSize {
			continue
		}
		bodyLen := int(be.Uint32(w))
		if bodyLen < bodyFixed || 4+bodyLen+HashSize > len(w) {
			continue
		}
		if seq := be.Uint64(w[4:]); seq < s.nextSeq {
			continue
		}
		if _, _, err := ParseFrame(s.Header.Anchor, w); err == nil {
			return from + int64(i), true
		}
	}
	return 0, false
}

// TestReadFrameAtRefusesImpossibleSize: the frame size ReadFrameAt is given
// comes from an index row. One no frame can have is INT_004 before any
// buffer is sized by it: a damaged row said 4 GiB, and ReadFrameAt
// allocated 4 GiB to find the file shorter.
func TestReadFrameAtRefusesImpossibleSize(t *testing.T) {
	seg := buildSegment(t, "a", 2, false)
	fr := seg.frames[1]
	r := bytes.NewReader(seg.data)
	if rec, _, err := ReadFrameAt(r, "a", int64(fr.off), fr.size, 2, nil); err != nil || rec.Hash != fr.rec.Hash {
		t.Fatalf("the frame itself: %v", err)
	}
	for _, size := range []int{-1, MaxFrameSize + 1, 1<<32 - 1} {
		var err error
		if n := allocated(func() { _, _, err = ReadFrameAt(r, "a", int64(fr.off), size, 2, nil) }); n > 1<<20 {
			t.Errorf("size %d: allocated %d bytes", size, n)
		}
		if fe := frameErr(t, err); fe.Kind != Corrupt || fe.Code != errs.CodeIndexMismatch || fe.Offset != int64(fr.off) || fe.Seq != 2 {
			t.Fatalf("size %d: %s %s %v", size, kindName(fe.Kind), fe.Code, err)
		}
	}
}
