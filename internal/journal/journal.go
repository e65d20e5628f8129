// Package journal is anchordb's commit log: the file every commit group is
// written to, and fsynced once, before anything else of the group becomes
// visible. Segment files and the index are written behind it and made
// durable later ("settled"), so one fdatasync covers a group however many
// anchors it touches.
//
// The journal is a sequence of files dir/<gen>.log, gen a 16-digit hex
// number. Each file is a sequence of blocks:
//
//	+-----------+-----------+-----------------+
//	| length L  | crc32c    | payload         |
//	| u32 BE    | u32 BE    | L bytes         |
//	+-----------+-----------+-----------------+
//
// The CRC (Castagnoli) covers gen ‖ L ‖ payload, so a block of an older file
// (or garbage) never passes for a block of this one. A reader stops at the
// first block that is short or fails its CRC: the end of the log. A file is
// only ever appended to, and a crash can tear only its last block.
//
// A writer keeps the file extended with zeros some way past its last block
// (Options.Prealloc), so that most fsyncs overwrite blocks the file already
// has instead of growing it: on ext4 an fdatasync that changes the file's
// size must also commit the inode, which measured 1.5–2× slower on the
// machines this was tuned on. A reader takes a block header that is all
// zeros (or shorter than a header and all zeros) followed by nothing but
// zeros to the end of the file as the end of the log, just as it takes the
// end of the file.
package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// HeaderSize is the size of a block header.
const HeaderSize = 8

// MaxPayload bounds one block. A larger length in a header is damage.
const MaxPayload = 1 << 30

var crcTable = crc32.MakeTable(crc32.Castagnoli)

var be = binary.BigEndian

// Pos is a position in the journal: a file generation and a byte offset in it.
type Pos struct {
	Gen uint64
	Off int64
}

// Less orders positions.
func (p Pos) Less(q Pos) bool { return p.Gen < q.Gen || (p.Gen == q.Gen && p.Off < q.Off) }

func (p Pos) String() string { return fmt.Sprintf("%d:%d", p.Gen, p.Off) }

// AppendBinary encodes p as 16 bytes.
func (p Pos) AppendBinary(dst []byte) []byte {
	dst = be.AppendUint64(dst, p.Gen)
	return be.AppendUint64(dst, uint64(p.Off))
}

// DecodePos decodes the 16 bytes AppendBinary writes; any other length,
// or an offset that is negative, is an error.
func DecodePos(b []byte) (Pos, error) {
	if len(b) != 16 {
		return Pos{}, fmt.Errorf("journal position of %d bytes", len(b))
	}
	p := Pos{Gen: be.Uint64(b), Off: int64(be.Uint64(b[8:]))}
	if p.Off < 0 {
		return Pos{}, fmt.Errorf("journal position at offset %d", p.Off)
	}
	return p, nil
}

// FileName is the name of journal file gen.
func FileName(gen uint64) string { return fmt.Sprintf("%016x.log", gen) }

func parseFileName(name string) (uint64, bool) {
	hexPart, ok := strings.CutSuffix(name, ".log")
	if !ok || len(hexPart) != 16 {
		return 0, false
	}
	g, err := strconv.ParseUint(hexPart, 16, 64)
	return g, err == nil && FileName(g) == name
}

// List returns the generations present in dir, ascending. A dir that is
// not a directory (a FIFO, whose list would block) is an
// *fsutil.EntryError.
func List(fs vfs.FS, dir string) ([]uint64, error) {
	names, err := fsutil.List(fs, dir)
	if err != nil {
		if errors.Is(err, vfsNotExist) || isNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	var gens []uint64
	for _, n := range names {
		if g, ok := parseFileName(n); ok {
			gens = append(gens, g)
		}
	}
	slices.Sort(gens)
	return gens, nil
}

// Frame prepares a block in place: buf must start with HeaderSize reserved
// bytes followed by the payload. It fills the header for generation gen.
func Frame(buf []byte, gen uint64) {
	payload := buf[HeaderSize:]
	be.PutUint32(buf[0:4], uint32(len(payload)))
	be.PutUint32(buf[4:8], checksum(gen, buf[0:4], payload))
}

func checksum(gen uint64, length, payload []byte) uint32 {
	var g [8]byte
	be.PutUint64(g[:], gen)
	c := crc32.Update(0, crcTable, g[:])
	c = crc32.Update(c, crcTable, length)
	return crc32.Update(c, crcTable, payload)
}

// Writer appends blocks to the newest journal file. Append and Rotate must
// not run concurrently with each other (the commit leader calls them); Sync
// and SyncTo may run concurrently with Append.
type Writer struct {
	fs  vfs.FS
	dir string

	mu   sync.Mutex // guards gen, file, off, pending (for SyncTo and readers of End)
	gen  uint64
	file vfs.File
	off  int64 // end of the journal: written and pending bytes
	// pending holds blocks appended with AppendBuffered and not yet written:
	// they start at file offset off-len(pending).
	pending []byte
	spare   []byte
	// written is how much of the current file has been written; a SyncTo
	// covers no more than that, never bytes another flush still holds.
	written int64
	// failed is the first failed write or fsync. The bytes a failed write
	// dropped, or the pages a failed fsync let the kernel drop, may be ones
	// a later SyncTo covers, so from then on every write and sync fails: the
	// journal never calls durable what is in no file.
	failed error
	// writeMu orders writes of pending bytes to the file.
	writeMu sync.Mutex
	// prealloc is how far past the data Flush keeps the file extended with
	// zeros; zeroGen and zeroed (guarded by writeMu) say how far file zeroGen
	// is extended. A failed extension turns it off for that file.
	prealloc       int64
	preallocFailed func(gen uint64, err error)
	zeroGen        uint64
	zeroed         int64
	// old holds the previous file until it has been synced, so a SyncTo for
	// a position in it is still honoured after a rotation.
	old *oldFile

	syncMu sync.Mutex // one fsync at a time; coalesces waiters
	synced Pos        // everything before is durable (guarded by mu)
}

type oldFile struct {
	gen  uint64
	file vfs.File
	end  int64
}

// Options tune a Writer.
type Options struct {
	// Prealloc is how many bytes of zeros the writer keeps written past the
	// last block of a busy file (one that holds at least as much): at least
	// half of it, extended to all of it when it falls short. A smaller file
	// gets as many as it holds, and at least Prealloc/64. 0 turns it off.
	Prealloc int64
	// PreallocFailed, if set, is told when writing a file's zeros failed
	// (the file then goes on without them; no append fails).
	PreallocFailed func(gen uint64, err error)
}

// DefaultPrealloc is the Prealloc anchordb uses: 4 MiB, so one fsync in
// every 2 MiB or more of journal extends the file.
const DefaultPrealloc = 4 << 20

// Create starts a new journal file of generation gen in dir (which must
// exist) and makes its directory entry durable.
func Create(fs vfs.FS, dir string, gen uint64, opts Options) (*Writer, error) {
	if opts.Prealloc < 0 {
		return nil, fmt.Errorf("journal preallocation of %d bytes", opts.Prealloc)
	}
	w := &Writer{fs: fs, dir: dir, prealloc: opts.Prealloc, preallocFailed: opts.PreallocFailed}
	f, err := w.createFile(gen)
	if err != nil {
		return nil, err
	}
	w.gen, w.file, w.synced = gen, f, Pos{Gen: gen}
	return w, nil
}

func (w *Writer) createFile(gen uint64) (vfs.File, error) {
	path := w.fs.PathJoin(w.dir, FileName(gen))
	f, err := w.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("create journal %s: %w", path, err)
	}
	d, err := w.fs.OpenDir(w.dir)
	if err == nil {
		err = d.Sync()
		if cerr := d.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("sync journal directory %s: %w", w.dir, err)
	}
	return f, nil
}

// Append writes one block (prepared with Frame for w's generation; see Gen)
// and returns the position just after it. The block reaches the OS before
// Append returns; it is durable only after a SyncTo covering it.
func (w *Writer) Append(block []byte) (Pos, error) {
	end := w.AppendBuffered(block)
	if err := w.Flush(); err != nil {
		return Pos{}, err
	}
	return end, nil
}

// AppendBuffered adds one block to the journal's buffer and returns the
// position just after it. Nothing reaches the OS until Flush or SyncTo: the
// commit leader uses it for groups that wait for an fsync anyway, so many
// groups share one write.
func (w *Writer) AppendBuffered(block []byte) Pos {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending = append(w.pending, block...)
	w.off += int64(len(block))
	return Pos{Gen: w.gen, Off: w.off}
}

// Flush writes the buffered blocks to the file (to the OS, not to disk).
func (w *Writer) Flush() error { return w.flush(true) }

// flush writes the buffered blocks, and the zeros past them when extend is
// set (not for a file about to be rotated away, which grows no further).
func (w *Writer) flush(extend bool) error {
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	w.mu.Lock()
	if err := w.failed; err != nil {
		w.mu.Unlock()
		return err
	}
	buf, f, gen := w.pending, w.file, w.gen
	at := w.off - int64(len(buf))
	w.pending, w.spare = w.spare[:0], nil
	w.mu.Unlock()
	if len(buf) == 0 {
		w.mu.Lock()
		w.spare = buf
		w.mu.Unlock()
		return nil
	}
	_, err := f.WriteAt(buf, at)
	if err == nil && extend {
		w.zeroAhead(f, gen, at+int64(len(buf)))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if cap(buf) <= 1<<20 {
		w.spare = buf[:0]
	}
	if err != nil {
		w.failed = fmt.Errorf("write journal %s at %d: %w", FileName(gen), at, err)
		return w.failed
	}
	if gen == w.gen {
		w.written = at + int64(len(buf))
	}
	return nil
}

// ahead is how far past end the zeros reach after an extension: as far as
// the file's data, between 1/64 of the Prealloc and all of it. A file that
// holds a few blocks (a one-off command, a test) gets a few zeros, not
// megabytes of them; a busy one soon gets the full distance.
func (w *Writer) ahead(end int64) int64 {
	return min(w.prealloc, max(w.prealloc/64, end))
}

// zeroAhead keeps file gen written with zeros to at least end+ahead/2,
// extending it to end+ahead when it falls short. It runs under writeMu,
// after the data up to end is written, so zeros never land on data. Its
// failure is not the journal's: the extension is only there to make fsyncs
// cheaper. It is turned off for the file, whose blocks and whatever zeros
// made it are still read correctly.
func (w *Writer) zeroAhead(f vfs.File, gen uint64, end int64) {
	if w.prealloc == 0 {
		return
	}
	if w.zeroGen != gen {
		w.zeroGen, w.zeroed = gen, 0
	}
	ahead := w.ahead(end)
	if w.zeroed < 0 || end+ahead/2 <= w.zeroed {
		return
	}
	from, to := max(w.zeroed, end), end+ahead
	zeros := zeroBlock()
	for off := from; off < to; {
		n := min(to-off, int64(len(zeros)))
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			w.zeroed = -1
			if w.preallocFailed != nil {
				w.preallocFailed(gen, err)
			}
			return
		}
		off += n
	}
	w.zeroed = to
}

// zeroBlock is a read-only buffer of zeros for extending files.
var zeroBlock = sync.OnceValue(func() []byte { return make([]byte, 1<<20) })

// Gen returns the generation blocks are framed for.
func (w *Writer) Gen() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen
}

// End returns the position after the last block appended.
func (w *Writer) End() Pos {
	w.mu.Lock()
	defer w.mu.Unlock()
	return Pos{Gen: w.gen, Off: w.off}
}

// WrittenSynced reports whether everything written to the OS so far is
// durable (blocks still buffered are not counted: they are not written).
func (w *Writer) WrittenSynced() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.synced.Less(Pos{Gen: w.gen, Off: w.written})
}

// SyncTo makes everything up to p durable. Concurrent callers share one
// fdatasync: a caller whose position an fsync already covered returns at once.
func (w *Writer) SyncTo(p Pos) error {
	w.mu.Lock()
	done := !w.synced.Less(p)
	w.mu.Unlock()
	if done {
		return nil
	}
	w.syncMu.Lock()
	defer w.syncMu.Unlock()
	w.mu.Lock()
	if !w.synced.Less(p) {
		w.mu.Unlock()
		return nil
	}
	w.mu.Unlock()
	if err := w.Flush(); err != nil {
		return err
	}
	w.mu.Lock()
	old, f, target := w.old, w.file, Pos{Gen: w.gen, Off: w.written}
	failed := w.failed
	w.mu.Unlock()
	if failed != nil {
		return failed
	}
	if target.Less(p) {
		// Unreachable while every block before p was buffered before this
		// SyncTo: its Flush wrote them or waited for the flush that did.
		return fmt.Errorf("journal position %v is not written (written to %v)", p, target)
	}
	if old != nil {
		if err := old.file.SyncData(); err != nil {
			return w.syncFailed(fmt.Errorf("fsync journal %s: %w", FileName(old.gen), err))
		}
	}
	if err := f.SyncData(); err != nil {
		return w.syncFailed(fmt.Errorf("fsync journal %s: %w", FileName(target.Gen), err))
	}
	w.mu.Lock()
	if w.synced.Less(target) {
		w.synced = target
	}
	if old != nil && w.old == old {
		w.old = nil
		_ = old.file.Close()
	}
	w.mu.Unlock()
	return nil
}

// syncFailed records a failed fsync as the writer's failure and returns
// it. After a failed fdatasync the kernel may have dropped the dirty pages
// it covered, and a later fsync can succeed without them: nothing written
// may be reported durable from then on.
func (w *Writer) syncFailed(err error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.syncFailedLocked(err)
}

// syncFailedLocked is syncFailed with w.mu held.
func (w *Writer) syncFailedLocked(err error) error {
	if w.failed == nil {
		w.failed = err
	}
	return err
}

// Sync makes everything appended so far durable.
func (w *Writer) Sync() error { return w.SyncTo(w.End()) }

// Rotate starts generation gen+1 and returns the position where it begins.
// The previous file stays open until a SyncTo covers it.
func (w *Writer) Rotate() (Pos, error) {
	if err := w.flush(false); err != nil {
		return Pos{}, err
	}
	w.mu.Lock()
	next := w.gen + 1
	w.mu.Unlock()
	f, err := w.createFile(next)
	if err != nil {
		return Pos{}, err
	}
	// A SyncTo in flight may be fsyncing the previous file outside mu; the
	// sync lock keeps it from being closed under it.
	w.syncMu.Lock()
	defer w.syncMu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.old != nil {
		// Never synced since the last rotation: sync it now, in order.
		if err := w.old.file.SyncData(); err != nil {
			_ = f.Close()
			return Pos{}, w.syncFailedLocked(fmt.Errorf("fsync journal %s: %w", FileName(w.old.gen), err))
		}
		_ = w.old.file.Close()
	}
	w.old = &oldFile{gen: w.gen, file: w.file, end: w.off}
	w.gen, w.file, w.off, w.written = next, f, 0, 0
	return Pos{Gen: next}, nil
}

// Close syncs and closes the journal.
func (w *Writer) Close() error {
	err := w.Sync()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.old != nil {
		err = errors.Join(err, w.old.file.Close())
		w.old = nil
	}
	return errors.Join(err, w.file.Close())
}

// RemoveBefore deletes every journal file older than gen. An entry of such
// a name that is not a regular file (a directory, a FIFO, a link to
// nothing) is no file the journal wrote: it is left as it is, and, older
// than gen, it is never read.
func RemoveBefore(fs vfs.FS, dir string, gen uint64) error {
	gens, err := List(fs, dir)
	if err != nil {
		return err
	}
	for _, g := range gens {
		if g >= gen {
			break
		}
		p := fs.PathJoin(dir, FileName(g))
		if _, err := fsutil.Regular(fs, p, true); err != nil {
			if fsutil.IsEntryError(err) {
				continue
			}
			return err
		}
		if err := fs.Remove(p); err != nil && !isNotExist(err) {
			return err
		}
	}
	return nil
}

// Block is one block read back.
type Block struct {
	Start, End Pos
	Payload    []byte // valid until the next block is read
}

// Tail describes where a journal file stops being readable.
type Tail struct {
	Pos    Pos    // the first byte not part of a good block
	Size   int64  // the file size
	Reason string // why reading stopped; "" at a clean end
	// Unread is how many bytes from Pos to the file's last nonzero byte
	// were not read as blocks (the zeros of preallocation after them do not
	// count); 0 at a clean end.
	Unread int64
}

// ReadFile reads the blocks of generation gen from offset from, calling fn
// for each. It stops at the end of the file or the first block that is short
// or fails its checksum, and says which in the returned Tail. A file that
// is not a regular file (a FIFO, whose open would block, a directory, a
// dangling link) is not opened: the error is an *fsutil.EntryError.
func ReadFile(fs vfs.FS, dir string, gen uint64, from int64, fn func(Block) error) (Tail, error) {
	path := fs.PathJoin(dir, FileName(gen))
	f, err := fsutil.Open(fs, path, true)
	if err != nil {
		return Tail{}, fmt.Errorf("open journal %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Tail{}, fmt.Errorf("stat journal %s: %w", path, err)
	}
	size := st.Size()
	off := from
	var hdr [HeaderSize]byte
	var buf []byte
	for {
		if off == size {
			return Tail{Pos: Pos{gen, off}, Size: size}, nil
		}
		if size-off < HeaderSize {
			return endOfLog(f, path, Pos{gen, off}, size, "short block header")
		}
		if _, err := f.ReadAt(hdr[:], off); err != nil {
			return Tail{}, fmt.Errorf("read journal %s at %d: %w", path, off, err)
		}
		n := int64(be.Uint32(hdr[0:4]))
		if n == 0 && be.Uint32(hdr[4:8]) == 0 {
			return endOfLog(f, path, Pos{gen, off}, size, "a zero block header with data after it")
		}
		if n == 0 || n > MaxPayload || n > size-off-HeaderSize {
			reason := "block runs past the end of the file"
			if n == 0 || n > MaxPayload {
				reason = fmt.Sprintf("impossible block length %d", n)
			}
			return endOfLog(f, path, Pos{gen, off}, size, reason)
		}
		if int64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := f.ReadAt(buf, off+HeaderSize); err != nil && !errors.Is(err, io.EOF) {
			return Tail{}, fmt.Errorf("read journal %s at %d: %w", path, off, err)
		}
		if checksum(gen, hdr[0:4], buf) != be.Uint32(hdr[4:8]) {
			return endOfLog(f, path, Pos{gen, off}, size, "checksum mismatch")
		}
		end := off + HeaderSize + n
		if err := fn(Block{Start: Pos{gen, off}, End: Pos{gen, end}, Payload: buf}); err != nil {
			return Tail{}, err
		}
		off = end
	}
}

// endOfLog is the Tail of a file whose blocks end at p, before its size:
// a clean end when only zeros follow (a writer's preallocation, whole or cut
// short by a failed write), and otherwise reason, with the bytes up to the
// last nonzero one counted as unread.
func endOfLog(f vfs.File, path string, p Pos, size int64, reason string) (Tail, error) {
	last, err := lastNonzero(f, p.Off, size)
	if err != nil {
		return Tail{}, fmt.Errorf("read journal %s at %d: %w", path, p.Off, err)
	}
	if last < p.Off {
		return Tail{Pos: p, Size: size}, nil
	}
	return Tail{Pos: p, Size: size, Reason: reason, Unread: last + 1 - p.Off}, nil
}

// lastNonzero returns the offset of the last nonzero byte of f in
// [off, size), or off-1 when there is none.
func lastNonzero(f vfs.File, off, size int64) (int64, error) {
	buf := make([]byte, 64<<10)
	last := off - 1
	for at := off; at < size; {
		n := min(size-at, int64(len(buf)))
		if _, err := f.ReadAt(buf[:n], at); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		for i := n - 1; i >= 0; i-- {
			if buf[i] != 0 {
				last = at + i
				break
			}
		}
		at += n
	}
	return last, nil
}
