package segment

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
)

// smallFrames are frames of every shape: put with idempotency key, delete,
// event without key, event with key.
func smallFrames() map[string]Record {
	g := GenesisHash("a")
	ev := Record{Anchor: "a", Seq: 4, Counter: 9, Time: -5, Type: "E", Key: []byte("k"), Value: []byte("p"), PrevHash: g}
	return map[string]Record{
		"put":          testRecord("a", 1, g),
		"delete":       testRecord("a", 2, g),
		"event no key": testRecord("a", 3, g),
		"event key":    ev,
	}
}

func TestParseFrameGood(t *testing.T) {
	for name, r := range smallFrames() {
		t.Run(name, func(t *testing.T) {
			frame := AppendFrame(nil, &r)
			for _, extra := range [][]byte{nil, {0}, bytes.Repeat([]byte{0xFF}, 100)} {
				got, n, err := ParseFrame("a", append(append([]byte(nil), frame...), extra...))
				if err != nil {
					t.Fatal(err)
				}
				if n != len(frame) || !sameRecord(got, r) {
					t.Fatalf("ParseFrame = %+v, %d; want %+v, %d", got, n, r, len(frame))
				}
			}
		})
	}
}

// TestParseFrameTruncations: every proper prefix of a frame is Torn, never
// Corrupt and never accepted.
func TestParseFrameTruncations(t *testing.T) {
	for name, r := range smallFrames() {
		t.Run(name, func(t *testing.T) {
			frame := AppendFrame(nil, &r)
			for k := 0; k < len(frame); k++ {
				_, n, err := ParseFrame("a", frame[:k])
				if err == nil {
					t.Fatalf("prefix of %d/%d bytes accepted (n=%d)", k, len(frame), n)
				}
				fe := frameErr(t, err)
				if fe.Kind != Torn {
					t.Fatalf("prefix of %d/%d bytes: kind %d, want Torn (%v)", k, len(frame), fe.Kind, err)
				}
				if n != 0 {
					t.Fatalf("prefix of %d bytes: n = %d on error", k, n)
				}
			}
		})
	}
}

// TestParseFrameEveryByteFlip changes every byte of small frames to every
// other value. No change may be accepted. Observed and pinned: a change of the
// 4-byte length that makes the frame longer than the bytes given is Torn; every
// other change is Corrupt with INT_001.
func TestParseFrameEveryByteFlip(t *testing.T) {
	for name, r := range smallFrames() {
		t.Run(name, func(t *testing.T) {
			frame := AppendFrame(nil, &r)
			b := make([]byte, len(frame))
			for i := range frame {
				for v := 1; v < 256; v++ {
					copy(b, frame)
					b[i] ^= byte(v)
					got, n, err := ParseFrame("a", b)
					if err == nil {
						t.Fatalf("byte %d ^= %#x accepted: %+v (n=%d)", i, v, got, n)
					}
					fe := frameErr(t, err)
					switch {
					case fe.Kind == Torn && i < 4 && be.Uint32(b) > be.Uint32(frame):
					case fe.Kind == Corrupt && fe.Code == errs.CodeHashMismatch:
					default:
						t.Fatalf("byte %d ^= %#x: kind %d code %q: %v", i, v, fe.Kind, fe.Code, err)
					}
				}
			}
		})
	}
}

// TestParseFrameOtherAnchor: a frame checked as another anchor's fails its
// hash, even when the other anchor differs in one byte or is a prefix.
func TestParseFrameOtherAnchor(t *testing.T) {
	r := testRecord("anchor", 1, GenesisHash("anchor"))
	frame := AppendFrame(nil, &r)
	for _, other := range []string{"anchoR", "ancho", "anchor ", "b", "Anchor"} {
		_, _, err := ParseFrame(other, frame)
		fe := frameErr(t, err)
		if fe.Kind != Corrupt || fe.Code != errs.CodeHashMismatch {
			t.Errorf("frame of %q read as %q: %v", "anchor", other, err)
		}
	}
	if _, _, err := ParseFrame("anchor", frame); err != nil {
		t.Fatal(err)
	}
}

// TestParseFrameDecodeErrors: frames whose hash matches their body but whose
// body breaks a structural rule are Corrupt, never accepted.
func TestParseFrameDecodeErrors(t *testing.T) {
	mk := func(mut func(r *Record)) []byte {
		r := testRecord("a", 1, GenesisHash("a"))
		mut(&r)
		return AppendFrame(nil, &r)
	}
	withBody := func(body []byte) []byte {
		b := be.AppendUint32(nil, uint32(len(body)))
		b = append(b, body...)
		h := HashBody("a", body)
		return append(b, h[:]...)
	}
	r := testRecord("a", 1, GenesisHash("a"))
	body := AppendBody(nil, &r)
	cases := map[string][]byte{
		"seq 0":           mk(func(r *Record) { r.Seq = 0 }),
		"put without key": mk(func(r *Record) { r.Key = nil }),
		"empty type":      mk(func(r *Record) { r.Type = "" }),
		"type too long":   mk(func(r *Record) { r.Type = string(bytes.Repeat([]byte("t"), 65)) }),
		"empty body":      withBody(nil),
		"short body":      withBody(body[:bodyFixed-1]),
		"trailing byte":   withBody(append(append([]byte(nil), body...), 0)),
		"missing byte":    withBody(body[:len(body)-1]),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := ParseFrame("a", b)
			fe := frameErr(t, err)
			if fe.Kind != Corrupt || fe.Code != errs.CodeHashMismatch {
				t.Fatalf("kind %d code %q: %v", fe.Kind, fe.Code, err)
			}
		})
	}
	// Lengths past the format maximum are Corrupt at once, whatever follows.
	for _, l := range []uint32{uint32(MaxFrameBody) + 1, 1 << 31, sealMarker - 1} {
		b := be.AppendUint32(nil, l)
		_, _, err := ParseFrame("a", b)
		if fe := frameErr(t, err); fe.Kind != Corrupt {
			t.Errorf("length %#x: %v, want Corrupt", l, err)
		}
	}
	// The seal marker is not a frame.
	if _, _, err := ParseFrame("a", be.AppendUint32(nil, sealMarker)); !errors.Is(err, errSealMarker) {
		t.Errorf("seal marker: %v", err)
	}
}

// --- ReadFrameAt ---------------------------------------------------------------

func TestReadFrameAt(t *testing.T) {
	seg := buildSegment(t, "a", 3, true)
	rd := bytes.NewReader(seg.data)

	t.Run("good", func(t *testing.T) {
		var buf []byte
		for _, f := range seg.frames {
			rec, nb, err := ReadFrameAt(rd, "a", int64(f.off), f.size, f.rec.Seq, buf)
			if err != nil {
				t.Fatalf("seq %d: %v", f.rec.Seq, err)
			}
			if !sameRecord(rec, f.rec) {
				t.Fatalf("seq %d: got %+v", f.rec.Seq, rec)
			}
			// The record is a copy: reusing the buffer must not change it.
			for i := range nb {
				nb[i] = 0
			}
			if !sameRecord(rec, f.rec) {
				t.Fatalf("seq %d: record aliases the buffer", f.rec.Seq)
			}
			buf = nb
		}
	})

	f := seg.frames[1]
	cases := []struct {
		name   string
		anchor string
		off    int64
		size   int
		seq    uint64
		kind   FrameErrorKind
		code   errs.Code
	}{
		{"wrong seq", "a", int64(f.off), f.size, f.rec.Seq + 1, Corrupt, errs.CodeChainBroken},
		{"wrong seq lower", "a", int64(f.off), f.size, f.rec.Seq - 1, Corrupt, errs.CodeChainBroken},
		{"size too large", "a", int64(f.off), f.size + 1, f.rec.Seq, Corrupt, errs.CodeIndexMismatch},
		{"size covers two frames", "a", int64(seg.frames[0].off), seg.frames[0].size + seg.frames[1].size, 1, Corrupt, errs.CodeIndexMismatch},
		{"points at seal", "a", int64(seg.sealOff), FooterSize, 4, Corrupt, errs.CodeIndexMismatch},
		{"other anchor", "b", int64(f.off), f.size, f.rec.Seq, Corrupt, errs.CodeHashMismatch},
		{"mid-frame offset", "a", int64(f.off + 1), f.size, f.rec.Seq, Corrupt, ""},
		{"short file", "a", int64(len(seg.data) - 10), f.size, f.rec.Seq, Torn, ""},
		{"past the end", "a", int64(len(seg.data) + 100), f.size, f.rec.Seq, Torn, ""},
		{"last frame, size past EOF", "a", int64(seg.sealOff), FooterSize + 1, 4, Torn, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec, _, err := ReadFrameAt(rd, c.anchor, c.off, c.size, c.seq, nil)
			if err == nil {
				t.Fatalf("accepted: %+v", rec)
			}
			fe := frameErr(t, err)
			if fe.Kind != c.kind {
				t.Fatalf("kind %d, want %d: %v", fe.Kind, c.kind, err)
			}
			if c.code != "" && fe.Code != c.code {
				t.Fatalf("code %q, want %q: %v", fe.Code, c.code, err)
			}
			if fe.Offset != c.off || fe.Seq != c.seq {
				t.Fatalf("located at offset %d seq %d, want %d / %d", fe.Offset, fe.Seq, c.off, c.seq)
			}
			if c.code != "" {
				if e := fe.AsError("a", "f.seg"); e.Code != c.code || e.File != "f.seg" || e.Offset != c.off || e.Anchor != "a" {
					t.Fatalf("AsError = %+v", e)
				}
			}
		})
	}
	t.Run("read error", func(t *testing.T) {
		boom := errors.New("boom")
		_, _, err := ReadFrameAt(errReaderAt{boom}, "a", 0, 10, 1, nil)
		if !errors.Is(err, boom) {
			t.Fatalf("err = %v, want the read error", err)
		}
	})
}

// TestReadFrameAtSizeTooSmall: an index entry whose size is smaller than the
// frame is an index mismatch (INT_004), the same as one whose size is larger.
func TestReadFrameAtSizeTooSmall(t *testing.T) {
	seg := buildSegment(t, "a", 3, false)
	f := seg.frames[1]
	var bad []string
	for _, size := range []int{f.size - 1, f.size - HashSize, 4, 1} {
		_, _, err := ReadFrameAt(bytes.NewReader(seg.data), "a", int64(f.off), size, f.rec.Seq, nil)
		fe := frameErr(t, err)
		if fe.Kind != Corrupt {
			t.Errorf("size %d: kind %d, want Corrupt: %v", size, fe.Kind, err)
		}
		if fe.Code != errs.CodeIndexMismatch {
			bad = append(bad, fmt.Sprintf("size %d of a %d-byte frame: code %q, AsError code %s (%v)",
				size, f.size, fe.Code, fe.AsError("a", "f").Code, err))
		}
	}
	knownBug(t, "ReadFrameAt with a size smaller than the frame returns a Corrupt FrameError with an empty Code "+
		"(AsError turns it into INT_002 chain_broken) instead of INT_004 index_mismatch", bad)
}

type errReaderAt struct{ err error }

func (e errReaderAt) ReadAt(p []byte, off int64) (int, error) { return 0, e.err }

// TestFrameErrorAsError checks the conversion to coded errors.
func TestFrameErrorAsError(t *testing.T) {
	torn := &FrameError{Kind: Torn, Offset: 7, Seq: 3, Msg: "x"}
	e := torn.AsError("a", "f")
	if e.Code != errs.CodeChainBroken || e.Anchor != "a" || e.Seq != 3 || e.File != "f" || e.Offset != 7 {
		t.Fatalf("torn AsError = %+v", e)
	}
	if !errs.IsCorruption(e) || !errors.Is(e, errs.ErrChainBroken) {
		t.Fatal("torn AsError is not a chain break")
	}
	c := &FrameError{Kind: Corrupt, Code: errs.CodeHashMismatch, Offset: 1}
	if c.AsError("a", "f").Code != errs.CodeHashMismatch {
		t.Fatal("corrupt AsError keeps its code")
	}
	if torn.Error() == c.Error() || !bytes.Contains([]byte(torn.Error()), []byte("torn")) || !bytes.Contains([]byte(c.Error()), []byte("corrupt")) {
		t.Fatalf("messages %q / %q", torn.Error(), c.Error())
	}
}

var _ io.ReaderAt = errReaderAt{}
