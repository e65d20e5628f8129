package snapshot

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/klauspost/compress/zstd"
)

const benchEntries = 100_000

// benchState is 100,000 entries: 16-byte keys, ~100-byte values with some
// repetition (JSON-ish documents), versions spread over 64 anchors.
var benchState = sync.OnceValues(func() (Frontier, []Entry) {
	fr := Frontier{}
	for i := 0; i < 64; i++ {
		fr[fmt.Sprintf("device-%02d", i)] = Head{Seq: benchEntries, Hash: hashOf(fmt.Sprint(i))}
	}
	entries := make([]Entry, benchEntries)
	for i := range entries {
		a := fmt.Sprintf("device-%02d", i%64)
		entries[i] = Entry{
			Key:     []byte(fmt.Sprintf("sensor/%09d", i)),
			Value:   []byte(fmt.Sprintf(`{"device":%q,"reading":%d,"unit":"mV","status":"ok","seq":%d,"pad":"%x"}`, a, i*7919%100000, i, i*2654435761)),
			Version: Version{Anchor: a, Seq: uint64(i/64 + 1), Counter: uint64(i + 1), Time: int64(i), Hash: hashOf(fmt.Sprint("r", i))},
		}
	}
	return fr, entries
})

// benchRaw is the decompressed body Create writes for benchState: the same
// state bytes the peer compresses.
var benchRaw = sync.OnceValue(func() []byte {
	fr, entries := benchState()
	anchors := make([]string, 0, len(fr))
	for a := range fr {
		anchors = append(anchors, a)
	}
	var buf bytes.Buffer
	ew := &entryWriter{raw: bufio.NewWriter(&buf), index: map[string]uint32{}, fr: fr, state: NewStateHasher()}
	slices.Sort(anchors)
	for i, a := range anchors {
		ew.index[a] = uint32(i)
	}
	for _, e := range entries {
		if err := ew.write(e); err != nil {
			panic(err)
		}
	}
	_ = ew.raw.Flush()
	return buf.Bytes()
})

func reportRates(b *testing.B, rawBytes int) {
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.N*benchEntries)/sec, "records/s")
	b.ReportMetric(float64(b.N*rawBytes)/sec/1e6, "MB/s")
}

// BenchmarkSnapshotCreate writes a 100,000-entry snapshot to an in-memory
// filesystem: encoding, state hash, zstd, file hash, fsync and rename.
// MB/s counts the decompressed state bytes.
func BenchmarkSnapshotCreate(b *testing.B) {
	benchCreate(b, func(b *testing.B) (vfs.FS, string) { return vfs.NewMem(), "snaps" })
}

// BenchmarkSnapshotCreateDisk is the same on the real filesystem, fsyncs
// included.
func BenchmarkSnapshotCreateDisk(b *testing.B) {
	benchCreate(b, func(b *testing.B) (vfs.FS, string) { return vfs.Default, b.TempDir() })
}

func benchCreate(b *testing.B, fsys func(*testing.B) (vfs.FS, string)) {
	fr, entries := benchState()
	raw := benchRaw()
	fs, dir := fsys(b)
	b.ReportAllocs()
	b.ResetTimer()
	var info Info
	for i := 0; i < b.N; i++ {
		var err error
		info, err = Create(fs, dir, Meta{Frontier: fr, Created: testCreated}, seqOf(entries))
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := Delete(fs, info.Path); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	reportRates(b, len(raw))
	b.ReportMetric(float64(info.Size), "file-bytes")
}

// BenchmarkPeerZstdOnly pushes the same state bytes through the same zstd
// settings into io.Discard: the floor Create's format and hashing add to.
func BenchmarkPeerZstdOnly(b *testing.B) {
	raw := benchRaw()
	enc, err := zstd.NewWriter(io.Discard, EncoderOptions()...)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		enc.Reset(io.Discard)
		for p := 0; p < len(raw); p += 64 << 10 {
			if _, err := enc.Write(raw[p:min(p+64<<10, len(raw))]); err != nil {
				b.Fatal(err)
			}
		}
		if err := enc.Close(); err != nil {
			b.Fatal(err)
		}
	}
	reportRates(b, len(raw))
}
