package engine

import (
	"bytes"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestCutReadsAChunkAtATime: recovery's cut of a torn tail saves the tail to
// lost+found and rewrites the segment without it. Both read the whole part
// they copy into one buffer: a 1 TiB segment (Options.SegmentSize allows
// it), or a damaged file as long as it happens to be, was read into memory
// whole. They now copy a chunk at a time, and copy the same bytes.
func TestCutReadsAChunkAtATime(t *testing.T) {
	fs := vfs.NewMem()
	var largest atomic.Int64
	hooked := readHookFS{FS: fs, under: "victim", onRead: func(n int) {
		for m := largest.Load(); int64(n) > m && !largest.CompareAndSwap(m, int64(n)); m = largest.Load() {
		}
	}}
	db := mustOpen(t, hooked, memOpts(hooked))
	defer db.Close()
	data := make([]byte, 5*copyChunk+123)
	for i := range data {
		data[i] = byte(rand.N(256))
	}
	path := fs.PathJoin("db", "victim.seg")
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(bytes.Clone(data)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	at := int64(3*copyChunk + 7)
	saved, err := (&reconciler{db: db}).saveCut(path, "victim", 1, at, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.truncateFile(path, at); err != nil {
		t.Fatal(err)
	}
	if n := largest.Load(); n > copyChunk {
		t.Fatalf("a cut read %d bytes at once (chunk %d)", n, copyChunk)
	}
	for _, c := range []struct {
		path string
		want []byte
	}{{saved, data[at:]}, {path, data[:at]}} {
		got, err := readWhole(fs, c.path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, c.want) {
			t.Fatalf("%s holds %d bytes, not the %d it should", c.path, len(got), len(c.want))
		}
	}
}
