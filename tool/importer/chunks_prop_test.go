package importer

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"pgregory.net/rapid"
)

// TestChunkVerifierProperty: whatever happens to a file between the passes,
// pass 2's reader yields a prefix of what pass 1 read, made only of whole
// chunks pass 1 hashed; it ends with io.EOF exactly when the file is
// unchanged and with ErrChanged otherwise.
func TestChunkVerifierProperty(t *testing.T) {
	defer func(n int) { chunkSize = n }(chunkSize)
	rapid.Check(t, func(t *rapid.T) {
		chunkSize = rapid.IntRange(1, 64).Draw(t, "chunk")
		orig := rapid.SliceOfN(rapid.Byte(), 0, 400).Draw(t, "orig")
		changed := bytes.Clone(orig)
		switch rapid.IntRange(0, 3).Draw(t, "change") {
		case 1: // flip a byte
			if len(changed) > 0 {
				i := rapid.IntRange(0, len(changed)-1).Draw(t, "at")
				changed[i] ^= byte(rapid.IntRange(1, 255).Draw(t, "xor"))
			}
		case 2: // shorten
			changed = changed[:rapid.IntRange(0, len(changed)).Draw(t, "len")]
		case 3: // grow
			changed = append(changed, rapid.SliceOfN(rapid.Byte(), 0, 100).Draw(t, "more")...)
		}

		h := newChunkHasher(bytes.NewReader(orig))
		if n, err := io.Copy(io.Discard, iotestHalfReader{h}); err != nil || n != int64(len(orig)) {
			t.Fatalf("pass 1 read %d of %d bytes: %v", n, len(orig), err)
		}
		v := h.verifier(bytes.NewReader(changed))
		got, err := io.ReadAll(iotestHalfReader{v})
		if bytes.Equal(orig, changed) {
			if err != nil || !bytes.Equal(got, orig) {
				t.Fatalf("unchanged file: read %d of %d bytes, %v", len(got), len(orig), err)
			}
			return
		}
		if !errors.Is(err, ErrChanged) {
			t.Fatalf("changed file: want ErrChanged, got %v", err)
		}
		if !bytes.HasPrefix(orig, got) || !bytes.HasPrefix(changed, got) {
			t.Fatalf("changed file: pass 2 yielded bytes pass 1 did not check")
		}
		if len(got)%chunkSize != 0 && len(got) != len(orig) {
			t.Fatalf("changed file: pass 2 yielded %d bytes, not whole chunks of %d", len(got), chunkSize)
		}
	})
}

// iotestHalfReader reads at most half of what is asked (at least one byte),
// so chunk boundaries fall inside reads.
type iotestHalfReader struct{ r io.Reader }

func (h iotestHalfReader) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:(len(p)+1)/2]
	}
	return h.r.Read(p)
}
