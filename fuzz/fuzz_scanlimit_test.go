package fuzz

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
)

// scanLimit is the Scanner.MaxBody the scanner targets also scan with: a
// record with the longest type and an 8-byte key, value and idempotency
// key. The fixtures' frames are under it, so a fuzzed length crosses it
// easily.
var scanLimit = segment.Limits{MaxKey: 8, MaxValue: 8, MaxIdempotencyKey: 8}.MaxBody()

// limitedScan is one scan's frames (offset and size) and its end.
type limitedScan struct {
	frames [][2]int64
	err    error
}

func scanWithLimit(data []byte, maxBody int) (limitedScan, bool) {
	var res limitedScan
	sc, err := segment.NewScanner(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return res, false
	}
	sc.MaxBody = maxBody
	for calls := 0; calls <= len(data)/64+3; calls++ {
		fr, err := sc.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				res.err = err
			}
			return res, true
		}
		res.frames = append(res.frames, [2]int64{fr.Offset, int64(fr.Size)})
	}
	return res, true
}

// checkScanLimited checks what Scanner.MaxBody changes, on any bytes: the
// frames read are those of the unlimited scan up to the first whose body is
// over the limit, and there the scan stops with OverLimit (INPUT_001) at
// that frame's offset and the seq it should carry, where the file declares a
// length over the limit (up to the format's). Nothing else differs: the
// same frames and the same error. An ingest relies on it to refuse a large
// frame from its length without changing what any other frame means.
func checkScanLimited(t *testing.T, data []byte) {
	t.Helper()
	ref, ok := scanWithLimit(data, 0)
	if !ok {
		return
	}
	lim, _ := scanWithLimit(data, scanLimit)
	if len(lim.frames) > len(ref.frames) {
		t.Fatalf("the limited scan read %d frames, the unlimited %d", len(lim.frames), len(ref.frames))
	}
	for i, fr := range lim.frames {
		if fr != ref.frames[i] {
			t.Fatalf("frame %d: limited %v, unlimited %v", i, fr, ref.frames[i])
		}
		if body := fr[1] - 4 - segment.HashSize; body > int64(scanLimit) {
			t.Fatalf("frame %d of body %d accepted over the limit %d", i, body, scanLimit)
		}
	}
	var fe *segment.FrameError
	if !errors.As(lim.err, &fe) || fe.Kind != segment.OverLimit {
		if len(lim.frames) != len(ref.frames) || (lim.err == nil) != (ref.err == nil) || (lim.err != nil && lim.err.Error() != ref.err.Error()) {
			t.Fatalf("the limit changed more than an over-limit frame: %d frames, %v; unlimited %d frames, %v",
				len(lim.frames), lim.err, len(ref.frames), ref.err)
		}
		return
	}
	at := int64(segment.HeaderSize("a"))
	if n := len(lim.frames); n > 0 {
		at = lim.frames[n-1][0] + lim.frames[n-1][1]
	} else if sc, err := segment.NewScanner(bytes.NewReader(data), int64(len(data))); err == nil {
		at = int64(sc.HeaderSize)
	}
	if fe.Offset != at || fe.Code != errs.CodeInvalidInput || at+4 > int64(len(data)) {
		t.Fatalf("OverLimit at %d (code %s), the frames end at %d: %v", fe.Offset, fe.Code, at, lim.err)
	}
	declared := binary.BigEndian.Uint32(data[at:])
	if declared <= uint32(scanLimit) || declared > segment.MaxFrameBody {
		t.Fatalf("OverLimit for a declared body of %d (limit %d, format %d)", declared, scanLimit, segment.MaxFrameBody)
	}
	if i := len(lim.frames); i < len(ref.frames) && ref.frames[i][0] != at {
		t.Fatalf("the unlimited scan's next frame is at %d, the limited one stopped at %d", ref.frames[i][0], at)
	}
}

// TestScanLimitedSeeds: the seeds the scanner targets got for MaxBody do
// reach the over-limit path, so checkScanLimited checks it on every run of
// the corpus, not only when the fuzzer happens on it.
func TestScanLimitedSeeds(t *testing.T) {
	for _, declared := range []uint32{uint32(scanLimit) + 1, 1 << 20, 512 << 20} {
		data := binary.BigEndian.AppendUint32(segmentFile("a", 2, false), declared)
		lim, ok := scanWithLimit(data, scanLimit)
		var fe *segment.FrameError
		if !ok || len(lim.frames) != 2 || !errors.As(lim.err, &fe) || fe.Kind != segment.OverLimit || fe.Seq != 3 {
			t.Fatalf("declared %d: %d frames, %v", declared, len(lim.frames), lim.err)
		}
		checkScanLimited(t, data)
	}
}
