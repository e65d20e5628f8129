package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestIngestNamedAnchorWithoutLog: an anchor named in IngestOptions.Anchors
// whose directory in the source holds no segment has no log there: it is
// STATE_003, as an anchor with no directory is, and nothing is joined. It
// was skipped in silence, and the ingest reported success without it.
func TestIngestNamedAnchorWithoutLog(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	src := openAt(t, fs, "src")
	writeSome(t, src, []string{"a"}, 3, "src")
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fs.MkdirAll(segmentAnchorDir(fs, "src", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	dst := openAt(t, fs, "dst")
	defer dst.Close()
	for _, named := range [][]string{{"b"}, {"a", "b"}} {
		rep, err := dst.Ingest(ctx, "src", IngestOptions{Anchors: named})
		if !errors.Is(err, ErrDependencyMissing) || rep.Appended != 0 {
			t.Fatalf("ingest of %q: %+v %v, want STATE_003 and nothing joined", named, rep, err)
		}
		if _, ok, _ := dst.AnchorInfo(context.Background(), "a"); ok {
			t.Fatalf("ingest of %q joined a", named)
		}
	}
	// Every anchor: the empty directory is no anchor, and a is joined.
	rep, err := dst.Ingest(ctx, "src", IngestOptions{})
	if err != nil || rep.Appended != 3 || len(rep.Anchors) != 1 {
		t.Fatalf("ingest of every anchor: %+v %v", rep, err)
	}
}

// readHookFS calls onRead with the size of every read of a file whose path
// holds under.
type readHookFS struct {
	vfs.FS
	under  string
	onRead func(n int)
}

func (f readHookFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	file, err := f.FS.Open(name, opts...)
	if err != nil || !strings.Contains(name, f.under) {
		return file, err
	}
	return readHookFile{File: file, onRead: f.onRead}, nil
}

type readHookFile struct {
	vfs.File
	onRead func(n int)
}

func (r readHookFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := r.File.ReadAt(p, off)
	r.onRead(n)
	return n, err
}

// TestIngestCancelStopsInsideASegment: a cancelled context stops an
// ingest's scan of the source inside a segment, not at its end. A segment
// may be up to 1 TiB (Options.SegmentSize), and the scan checked the
// context only between segments: Ctrl-C went unanswered while it hashed
// the rest.
func TestIngestCancelStopsInsideASegment(t *testing.T) {
	mem := vfs.NewMem()
	size := oneLargeSegmentSource(t, mem)
	ctx := context.Background()

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var read atomic.Int64
	hook := readHookFS{FS: mem, under: "src/anchors", onRead: func(n int) {
		if read.Add(int64(n)) > 1<<20 {
			cancel() // the scan is inside the segment
		}
	}}
	dst, err := Open("dst", Options{FS: hook})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	rep, err := dst.Ingest(cctx, "src", IngestOptions{})
	if !errors.Is(err, context.Canceled) || rep.Appended != 0 {
		t.Fatalf("%+v %v, want the cancellation with nothing joined", rep, err)
	}
	if got := read.Load(); got > size/2 {
		t.Fatalf("the cancelled ingest read %d bytes of the %d-byte segment", got, size)
	}
}

// TestIngestEmptySourceLogIsAPrefix: an arriving log with no record (its
// segment holds only a header) is a prefix of any log of that anchor: up to
// date, not a fork nor an index mismatch.
func TestIngestEmptySourceLogIsAPrefix(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	src := openAt(t, fs, "src")
	writeSome(t, src, []string{"a"}, 2, "src")
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	h := segment.Header{Anchor: "b", Segno: 1, FirstSeq: 1, PrevHash: segment.GenesisHash("b")}
	bdir := segmentAnchorDir(fs, "src", "b")
	if err := fs.MkdirAll(bdir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create(fs.PathJoin(bdir, segment.FileName(1)), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(segment.AppendHeader(nil, &h)); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()

	dst := openAt(t, fs, "dst")
	defer dst.Close()
	writeSome(t, dst, []string{"b"}, 3, "dst")
	rep, err := dst.Ingest(ctx, "src", IngestOptions{})
	if err != nil || rep.Appended != 2 {
		t.Fatalf("%+v %v, want a joined and b up to date", rep, err)
	}
	for _, a := range rep.Anchors {
		if a.Anchor == "b" && (a.Status != "up_to_date" || a.Had != 3) {
			t.Fatalf("b: %+v", a)
		}
	}
}

// TestIngestCloseStopsTheForkCheckScan: Close stops an ingest inside the
// scan that compares an anchor we hold with the arriving one (checkJoin
// reads the source up to our head), not at the end of the segment: Close
// waits for the ingest, and a segment may be up to 1 TiB. Only pass 1's
// scan looked at Close.
func TestIngestCloseStopsTheForkCheckScan(t *testing.T) {
	mem := vfs.NewMem()
	size := oneLargeSegmentSource(t, mem)
	ctx := context.Background()

	var read atomic.Int64
	var closing atomic.Bool
	var dst *DB
	closed := make(chan error, 1)
	hook := readHookFS{FS: mem, under: "src/anchors", onRead: func(n int) {
		// Pass 1 reads the segment once; the fork check reads it again.
		if read.Add(int64(n)) > size+1<<20 && closing.CompareAndSwap(false, true) {
			go func() { closed <- dst.Close() }()
			for !dst.adm.Closing() {
				runtime.Gosched()
			}
		}
	}}
	var err error
	dst, err = Open("dst", Options{FS: hook, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	// dst holds all but the last record of a: the fork check compares the
	// second-last seq, near the end of the segment.
	recs := logOf(t, mem, "src", "a")
	if len(recs) != largeSourceRecords {
		t.Fatalf("the source log has %d records", len(recs))
	}
	for i := 0; i < len(recs)-1; i += 1000 {
		if err := dst.appendVerbatim(ctx, recs[i:min(i+1000, len(recs)-1)]); err != nil {
			t.Fatal(err)
		}
	}
	read.Store(0)
	_, err = dst.Ingest(ctx, "src", IngestOptions{})
	if err == nil {
		t.Fatal("the ingest went on after Close began")
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if got := read.Load(); got > size+size/2 {
		t.Fatalf("the ingest read %d bytes of the %d-byte segment after Close began at %d", got, size, size+1<<20)
	}
}

// logOf returns the log of the anchor of the database in dir.
func logOf(t *testing.T, mem vfs.FS, dir, anchor string) []segment.Record {
	t.Helper()
	db, err := Open(dir, Options{FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var recs []segment.Record
	for rec, err := range db.Log(context.Background(), anchor, 1, 0) {
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec.segment().Clone())
	}
	return recs
}

// oneLargeSegmentSource writes a source database "src" on mem whose anchor
// "a" holds largeSourceRecords records in one segment (about 5 MB), and
// returns that segment's size: enough for a scan to be stopped well inside
// it (the tests stop it 1 MiB in and allow half the segment).
const largeSourceRecords = 16000

func oneLargeSegmentSource(t *testing.T, mem *vfs.MemFS) int64 {
	t.Helper()
	src, err := Open("src", Options{FS: mem, SegmentSize: 1 << 30, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	value := bytes.Repeat([]byte("v"), 256)
	for b := 0; b < largeSourceRecords/1000; b++ {
		var batch []Entry
		for i := 0; i < 1000; i++ {
			batch = append(batch, Entry{Anchor: "a", Type: "put", Key: []byte(fmt.Sprintf("k%d", b*1000+i)), Value: value})
		}
		if _, err := src.AppendBatch(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := mem.Stat(segmentFileOf(mem, "src", "a", 1))
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}
