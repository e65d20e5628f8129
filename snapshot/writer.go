package snapshot

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/blake3"
)

// Meta is what a snapshot states about itself besides its entries.
type Meta struct {
	// Frontier is the frontier the state is taken at: every anchor with
	// records, its last seq and head hash.
	Frontier Frontier
	// PolicyRef is the policy_ref ("blake3:<64 hex>") of the policy that made
	// the snapshot, or "" for none.
	PolicyRef string
	// Created is the creation time; zero means now.
	Created time.Time
}

// EncoderOptions are the zstd settings of snapshot bodies: the default level,
// and one block compressed ahead while the next is filled, so memory stays a
// few windows whatever the state's size. Exported so benchmarks compare
// like with like.
func EncoderOptions() []zstd.EOption {
	return []zstd.EOption{zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(2)}
}

const writeBufferSize = 256 << 10

// encoders keeps zstd encoders (megabytes of tables each) across Creates.
var encoders sync.Pool

func getEncoder(w io.Writer) (*zstd.Encoder, error) {
	if enc, ok := encoders.Get().(*zstd.Encoder); ok {
		enc.Reset(w)
		return enc, nil
	}
	return zstd.NewWriter(w, EncoderOptions()...)
}

// putEncoder returns an encoder to the pool. It first ends the stream it was
// writing (a no-op when it was closed), detached from its writer so that an
// abandoned stream writes nothing more to the file.
func putEncoder(enc *zstd.Encoder) {
	enc.Reset(io.Discard)
	_ = enc.Close()
	encoders.Put(enc)
}

// Create writes a snapshot of the entries at meta's frontier into dir and
// returns its Info. Entries must come in strictly ascending key order, each
// with a non-empty key and a version inside the frontier (an anchor of the
// frontier, seq from 1 to its frontier seq); anything else is INPUT_001. An
// error from the entries sequence is returned wrapped, its code kept. Create
// keeps no entry's slices past the step that yielded it, so the sequence may
// reuse its buffers.
//
// Create streams: memory is bounded by the compressor's window and the
// largest entry, not by the number of entries. It writes atomically — a temp
// file, fsync, rename to the final name (FileName), fsync of the directory —
// and removes the temp file on failure. Write and sync failures are IO_001.
// If only the final directory fsync fails the file is complete and valid
// under its final name but may not survive a power loss; the error says so.
// Create makes dir if needed. It is safe to call concurrently with readers
// of other snapshots; two Creates in one directory do not collide.
func Create(fs vfs.FS, dir string, meta Meta, entries iter.Seq2[Entry, error]) (Info, error) {
	if err := meta.Frontier.Validate(); err != nil {
		return Info{}, err
	}
	var policyRef segment.Hash
	if meta.PolicyRef != "" {
		h, err := segment.ParseHash(meta.PolicyRef)
		if err != nil {
			return Info{}, fmt.Errorf("snapshot policy_ref: %w", err)
		}
		policyRef = h
	}
	created := meta.Created
	if created.IsZero() {
		created = time.Now()
	}
	created = created.UTC().Round(0)
	if created.UnixNano() < 0 || created.Year() > 2200 {
		return Info{}, errs.New(errs.CodeInvalidInput, "snapshot creation time %s outside 1970..2200", created)
	}
	anchors := make([]string, 0, len(meta.Frontier))
	for a := range meta.Frontier {
		anchors = append(anchors, a)
	}
	slices.Sort(anchors)
	hdr, hdrSum := appendHeader(nil, created, policyRef, anchors, meta.Frontier)
	if len(hdr) > maxHeaderLength {
		return Info{}, errs.New(errs.CodeInvalidInput, "snapshot frontier of %s makes a %d-byte header (limit %d)", plural(len(anchors), "anchor"), len(hdr), maxHeaderLength)
	}

	if err := mkdirAll(fs, dir); err != nil {
		return Info{}, errs.Wrap(errs.CodeWriteFailed, err, "snapshot: create directory %s", dir)
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := fs.PathJoin(dir, fmt.Sprintf("snapshot-%020d-%s%s%s", created.UnixNano(), hex.EncodeToString(rnd[:]), Ext, TempExt))
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return Info{}, errs.Wrap(errs.CodeWriteFailed, err, "snapshot: create %s", tmp)
	}
	w := &fileWriter{f: f, h: blake3.NewDeriveKey(ContextFile)}
	w.buf = bufio.NewWriterSize(w, writeBufferSize)
	ft, err := writeSnapshot(w, hdr, hdrSum, anchors, meta.Frontier, entries)
	if err == nil {
		err = w.finish()
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = errs.Wrap(errs.CodeWriteFailed, cerr, "snapshot: close %s", tmp)
	}
	if err != nil {
		_ = fs.Remove(tmp)
		return Info{}, err
	}

	name := FileName(created, ft.fileHash)
	path := fs.PathJoin(dir, name)
	if err := fs.Rename(tmp, path); err != nil {
		_ = fs.Remove(tmp)
		return Info{}, errs.Wrap(errs.CodeWriteFailed, err, "snapshot: rename %s to %s", tmp, name)
	}
	info := Info{
		Name: name, Path: path, Format: FormatVersion, Created: created, PolicyRef: meta.PolicyRef,
		Frontier: cloneFrontier(meta.Frontier), Entries: ft.entries, RawSize: ft.rawSize,
		Size: w.n + hashSize, StateHash: ft.stateHash, FileHash: ft.fileHash,
	}
	if err := syncDir(fs, dir); err != nil {
		return info, errs.Wrap(errs.CodeWriteFailed, err, "snapshot %s written but the directory fsync failed: it may not survive a power loss", path)
	}
	return info, nil
}

// writeSnapshot writes header, body and footer (all but the file hash).
func writeSnapshot(w *fileWriter, hdr []byte, hdrSum segment.Hash, anchors []string, fr Frontier, entries iter.Seq2[Entry, error]) (footer, error) {
	var ft footer
	if _, err := w.buf.Write(hdr); err != nil {
		return ft, w.writeErr(err)
	}
	bodyStart := w.count()
	enc, err := getEncoder(w.buf)
	if err != nil {
		return ft, fmt.Errorf("snapshot: zstd encoder: %w", err)
	}
	defer putEncoder(enc)
	ew := &entryWriter{
		raw:   bufio.NewWriterSize(enc, 64<<10),
		index: make(map[string]uint32, len(anchors)),
		fr:    fr,
		state: NewStateHasher(),
	}
	for i, a := range anchors {
		ew.index[a] = uint32(i)
	}
	for e, err := range entries {
		if err != nil {
			return ft, fmt.Errorf("snapshot: entries after %d: %w", ew.state.Count(), err)
		}
		if err := ew.write(e); err != nil {
			if w.err != nil {
				return ft, w.writeErr(w.err)
			}
			return ft, err
		}
	}
	if err := ew.raw.Flush(); err != nil {
		return ft, w.writeErr(err)
	}
	if err := enc.Close(); err != nil {
		return ft, w.writeErr(err)
	}
	ft.bodyLen = uint64(w.count() - bodyStart)
	ft.entries = ew.state.Count()
	ft.rawSize = ew.rawSize
	ft.stateHash = ew.state.Sum()
	if _, err := w.buf.Write(appendFooterChecked(nil, ft, hdrSum)); err != nil {
		return ft, w.writeErr(err)
	}
	if err := w.buf.Flush(); err != nil {
		return ft, w.writeErr(err)
	}
	w.h.Sum(ft.fileHash[:0])
	return ft, nil
}

// entryWriter encodes entries into the (compressing) raw stream.
type entryWriter struct {
	raw     *bufio.Writer
	index   map[string]uint32
	fr      Frontier
	state   *StateHasher
	rawSize uint64
	scratch [entryFixed]byte
	err     error // first error writing the raw stream
}

// put writes b to the raw stream unless an earlier write failed.
func (ew *entryWriter) put(b []byte) {
	if ew.err == nil {
		_, ew.err = ew.raw.Write(b)
	}
}

func (ew *entryWriter) write(e Entry) error {
	n := ew.state.Count()
	if len(e.Key) > segment.MaxFormatKey || len(e.Value) > segment.MaxFormatValue {
		return errs.New(errs.CodeInvalidInput, "snapshot entry %d: key of %d bytes or value of %d bytes exceeds the format (%d, %d)",
			n, len(e.Key), len(e.Value), segment.MaxFormatKey, segment.MaxFormatValue)
	}
	idx, ok := ew.index[e.Version.Anchor]
	if !ok {
		return errs.New(errs.CodeInvalidInput, "snapshot entry %q: version anchor %q is not in the frontier", e.Key, e.Version.Anchor)
	}
	if h := ew.fr[e.Version.Anchor]; e.Version.Seq == 0 || e.Version.Seq > h.Seq {
		return errs.New(errs.CodeInvalidInput, "snapshot entry %q: version %q/%d lies outside the frontier (seq 1..%d)",
			e.Key, e.Version.Anchor, e.Version.Seq, h.Seq)
	}
	if err := ew.state.Add(e.Key, e.Value); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	s := be.AppendUint32(ew.scratch[:0], uint32(len(e.Key)))
	ew.put(s)
	ew.put(e.Key)
	ew.put(be.AppendUint32(s[:0], uint32(len(e.Value))))
	ew.put(e.Value)
	s = be.AppendUint32(s[:0], idx)
	s = be.AppendUint64(s, e.Version.Seq)
	s = be.AppendUint64(s, e.Version.Counter)
	s = be.AppendUint64(s, uint64(e.Version.Time))
	s = append(s, e.Version.Hash[:]...)
	ew.put(s)
	if ew.err != nil {
		return errs.Wrap(errs.CodeWriteFailed, ew.err, "snapshot: write entry %d", n)
	}
	ew.rawSize += uint64(entryFixed + len(e.Key) + len(e.Value))
	return nil
}

// fileWriter hashes every byte before handing it to the file (MemFS may
// scribble on a buffer after Write, so hash first) and counts them.
type fileWriter struct {
	f   vfs.File
	h   *blake3.Hasher
	buf *bufio.Writer
	n   int64 // bytes handed to the file
	err error // first write error
}

func (w *fileWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	_, _ = w.h.Write(p)
	n, err := w.f.Write(p)
	w.n += int64(n)
	if err == nil && n < len(p) {
		err = errors.New("short write")
	}
	if err != nil {
		w.err = err
	}
	return n, err
}

// count is the number of bytes written so far, buffered or not.
func (w *fileWriter) count() int64 { return w.n + int64(w.buf.Buffered()) }

func (w *fileWriter) writeErr(err error) error {
	if w.err != nil {
		err = w.err
	}
	return errs.Wrap(errs.CodeWriteFailed, err, "snapshot: write")
}

// finish appends the file hash (not itself hashed) and fsyncs.
func (w *fileWriter) finish() error {
	var sum [hashSize]byte
	w.h.Sum(sum[:0])
	if _, err := w.f.Write(sum[:]); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "snapshot: write file hash")
	}
	if err := w.f.Sync(); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "snapshot: fsync")
	}
	return nil
}

// mkdirAll creates dir and its missing parents, and fsyncs the parent of each
// directory it creates so that the new directories survive a crash.
func mkdirAll(fs vfs.FS, dir string) error {
	var missing []string
	for d := dir; ; d = fs.PathDir(d) {
		_, err := fs.Stat(d)
		if err == nil {
			break
		}
		if !isNotExist(err) {
			return err
		}
		missing = append(missing, d)
		if fs.PathDir(d) == d {
			break
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := syncDir(fs, fs.PathDir(missing[i])); err != nil {
			return err
		}
	}
	return nil
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return err
	}
	return d.Close()
}

func cloneFrontier(f Frontier) Frontier {
	out := make(Frontier, len(f))
	for a, h := range f {
		out[a] = h
	}
	return out
}

// Delete removes a snapshot file and fsyncs its directory, so the removal is
// durable when Delete returns. Failures are IO_001.
func Delete(fs vfs.FS, path string) error {
	if err := fs.Remove(path); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "snapshot: remove %s", path)
	}
	if err := syncDir(fs, fs.PathDir(path)); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "snapshot: fsync directory after removing %s", path)
	}
	return nil
}

// CleanTemp removes the temp files a crash during Create left in dir and
// returns their names. Call it only while no Create runs in dir (the engine
// holds its writer lock).
//
// A dir that is not a directory holds no temp file: nothing is removed (and
// List says what it is).
func CleanTemp(fs vfs.FS, dir string) ([]string, error) {
	names, err := fsutil.List(fs, dir)
	if err != nil {
		if isNotExist(err) || fsutil.IsEntryError(err) {
			return nil, nil
		}
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "snapshot: list %s", dir)
	}
	var removed []string
	for _, n := range names {
		if !strings.HasSuffix(n, Ext+TempExt) {
			continue
		}
		if err := fs.Remove(fs.PathJoin(dir, n)); err != nil {
			return removed, errs.Wrap(errs.CodeWriteFailed, err, "snapshot: remove %s", n)
		}
		removed = append(removed, n)
	}
	if len(removed) > 0 {
		if err := syncDir(fs, dir); err != nil {
			return removed, errs.Wrap(errs.CodeWriteFailed, err, "snapshot: fsync %s", dir)
		}
	}
	return removed, nil
}
