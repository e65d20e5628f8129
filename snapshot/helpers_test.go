package snapshot

import (
	"fmt"
	"io"
	"iter"
	"testing"
	"time"

	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/zeebo/blake3"
)

var testCreated = time.Date(2026, 1, 31, 12, 0, 0, 1, time.UTC)

func hashOf(s string) segment.Hash { return blake3.Sum256([]byte(s)) }

// testState returns n sorted entries whose versions lie inside the returned
// frontier.
func testState(n int) (Frontier, []Entry) {
	fr := Frontier{
		"a":      {Seq: uint64(n) + 1, Hash: hashOf("head a")},
		"é":      {Seq: 7, Hash: hashOf("head é")},
		"user@h": {Seq: 1, Hash: hashOf("head u")},
	}
	anchors := []string{"a", "é", "user@h"}
	out := make([]Entry, n)
	for i := range out {
		a := anchors[i%len(anchors)]
		out[i] = Entry{
			Key:   []byte(fmt.Sprintf("key-%05d", i)),
			Value: []byte(fmt.Sprintf("value %d %s", i*i, a)),
			Version: Version{Anchor: a, Seq: min(uint64(i%7)+1, fr[a].Seq), Counter: uint64(100 + i),
				Time: testCreated.UnixNano() + int64(i), Hash: hashOf(fmt.Sprint("record ", i))},
		}
	}
	return fr, out
}

func seqOf(entries []Entry) iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		for _, e := range entries {
			if !yield(e, nil) {
				return
			}
		}
	}
}

func readFile(t testing.TB, fs vfs.FS, path string) []byte {
	t.Helper()
	f, err := fs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t testing.TB, fs vfs.FS, path string, b []byte) {
	t.Helper()
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(append([]byte(nil), b...)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func mustCreate(t testing.TB, fs vfs.FS, dir string, meta Meta, entries []Entry) Info {
	t.Helper()
	info, err := Create(fs, dir, meta, seqOf(entries))
	if err != nil {
		t.Fatal(err)
	}
	return info
}
