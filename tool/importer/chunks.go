package importer

import (
	"errors"
	"io"

	"github.com/zeebo/blake3"

	"github.com/anchordb/anchordb/internal/errs"
)

// An import reads a regular file twice: pass 1 checks every line, pass 2
// appends them. Another process may write the file in between. Pass 1
// therefore hashes the file in chunks as it reads it, and pass 2 hands a
// chunk's bytes to the line parser only after its hash matched: every byte
// pass 2 appends is a byte pass 1 checked. A chunk that differs, a file
// that became shorter or one that grew stops the import with INPUT_001 at
// the first line not yet appended.

// chunkSize is the size of the chunks both passes hash. 32 bytes of
// hashes per MiB of input are kept between the passes.
var chunkSize = 1 << 20

// ErrChanged is what an import of a file that changed between the passes
// fails with, wrapped in an INPUT_001 error that says where (errors.Is
// finds it).
var ErrChanged = errors.New("the import file changed after it was checked")

// chunkHasher hashes what pass 1 reads from r, chunk by chunk.
type chunkHasher struct {
	r     io.Reader
	h     *blake3.Hasher
	fill  int // bytes of the current chunk hashed so far
	total int64
	sums  [][32]byte
}

func newChunkHasher(r io.Reader) *chunkHasher {
	return &chunkHasher{r: r, h: blake3.New()}
}

func (c *chunkHasher) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.total += int64(n)
	for b := p[:n]; len(b) > 0; {
		k := min(len(b), chunkSize-c.fill)
		_, _ = c.h.Write(b[:k])
		c.fill += k
		b = b[k:]
		if c.fill == chunkSize {
			c.endChunk()
		}
	}
	return n, err
}

func (c *chunkHasher) endChunk() {
	var s [32]byte
	c.h.Sum(s[:0])
	c.sums = append(c.sums, s)
	c.h.Reset()
	c.fill = 0
}

// verifier returns a reader of r (the same file, rewound) that yields
// exactly the bytes hashed so far, and fails with ErrChanged where
// they differ.
func (c *chunkHasher) verifier(r io.Reader) *chunkVerifier {
	if c.fill > 0 {
		c.endChunk()
	}
	return &chunkVerifier{r: r, sums: c.sums, total: c.total}
}

// chunkVerifier is pass 2's reader: it reads one chunk ahead and releases
// it only once its hash matches pass 1's.
type chunkVerifier struct {
	r     io.Reader
	sums  [][32]byte
	total int64 // bytes pass 1 read
	next  int   // chunks verified so far
	buf   []byte
	avail []byte // verified bytes not yet read
	err   error
}

func (v *chunkVerifier) Read(p []byte) (int, error) {
	if len(v.avail) == 0 && v.err == nil {
		v.err = v.loadChunk()
	}
	if len(v.avail) > 0 {
		n := copy(p, v.avail)
		v.avail = v.avail[n:]
		return n, nil
	}
	return 0, v.err
}

func (v *chunkVerifier) loadChunk() error {
	if v.next == len(v.sums) {
		// Everything pass 1 checked has been read: the file must end here.
		var one [1]byte
		n, err := io.ReadFull(v.r, one[:])
		if n > 0 {
			return errs.Wrap(errs.CodeInvalidInput, ErrChanged, "it holds more than the %d bytes checked", v.total)
		}
		if err != nil && err != io.EOF {
			return errs.Wrap(errs.CodeWriteFailed, err, "read the import file")
		}
		return io.EOF
	}
	size := chunkSize
	if v.next == len(v.sums)-1 {
		size = int(v.total - int64(v.next)*int64(chunkSize))
	}
	if cap(v.buf) < size {
		v.buf = make([]byte, size)
	}
	buf := v.buf[:size]
	if n, err := io.ReadFull(v.r, buf); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return errs.Wrap(errs.CodeInvalidInput, ErrChanged, "it ends at byte %d; %d bytes were checked", int64(v.next)*int64(chunkSize)+int64(n), v.total)
		}
		return errs.Wrap(errs.CodeWriteFailed, err, "read the import file")
	}
	sum := blake3.Sum256(buf)
	if sum != v.sums[v.next] {
		start := int64(v.next) * int64(chunkSize)
		return errs.Wrap(errs.CodeInvalidInput, ErrChanged, "bytes %d–%d are not the bytes checked", start, start+int64(size))
	}
	v.next++
	v.avail = buf
	return nil
}
