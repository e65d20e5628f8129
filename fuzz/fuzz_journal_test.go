package fuzz

import (
	"bytes"
	"testing"

	"github.com/anchordb/anchordb/internal/journal"
	"github.com/cockroachdb/pebble/v2/vfs"
)

const journalGen = 7

// framed returns a journal block of generation journalGen around payload.
func framed(payload []byte) []byte {
	b := append(make([]byte, journal.HeaderSize), payload...)
	journal.Frame(b, journalGen)
	return b
}

// FuzzJournalRead: recovery reads journal files a crash may have torn, a
// power loss may have left with stale or zero pages, and preallocation
// leaves with zeros after the last block. Never panic; every block accepted
// is one the writer could have framed, and they tile the file from its start;
// the log ends cleanly exactly when nothing but zeros follows the last block,
// and otherwise the unread bytes end at the last nonzero one.
//
// The first byte picks the mode: even, the rest is the file as it is; odd,
// the rest is a list of payloads (a length byte L, then L+1 bytes) framed as
// valid blocks, and whatever is left after the list is appended raw — so the
// fuzzer reaches the tail rules behind blocks whose checksums hold.
func FuzzJournalRead(f *testing.F) {
	valid := append(framed([]byte("first")), framed(bytes.Repeat([]byte{9}, 300))...)
	f.Add(append([]byte{0}, valid...))
	f.Add(append(append([]byte{0}, valid...), make([]byte, 4096)...))
	f.Add(append(append(append([]byte{0}, valid...), make([]byte, 100)...), 1))
	f.Add(append(append([]byte{0}, valid...), valid[:10]...))
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{1, 4, 'a', 'b', 'c', 'd', 'e', 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 0, 'x', 2, 'y', 'y', 'y', 0, 0, 0, 5, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		var data []byte
		var want [][]byte // payloads that must be read back, in order
		if in[0]%2 == 0 {
			data = in[1:]
		} else {
			rest := in[1:]
			for len(rest) > 0 && int(rest[0])+2 <= len(rest) {
				p := rest[1 : 2+int(rest[0])]
				want = append(want, p)
				data = append(data, framed(p)...)
				rest = rest[2+int(rest[0]):]
			}
			data = append(data, rest...)
		}
		fs := vfs.NewMem()
		if err := fs.MkdirAll("j", 0o755); err != nil {
			t.Fatal(err)
		}
		file, err := fs.Create(fs.PathJoin("j", journal.FileName(journalGen)), vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := file.Write(data); err != nil {
			t.Fatal(err)
		}
		_ = file.Close()

		var got [][]byte
		end := int64(0)
		tail, err := journal.ReadFile(fs, "j", journalGen, 0, func(b journal.Block) error {
			if b.Start.Off != end || b.End.Off > int64(len(data)) {
				t.Fatalf("block %v..%v does not follow the previous one ending at %d in %d bytes", b.Start, b.End, end, len(data))
			}
			if !bytes.Equal(framed(b.Payload), data[b.Start.Off:b.End.Off]) {
				t.Fatalf("block at %d is not a block the writer frames", b.Start.Off)
			}
			got = append(got, bytes.Clone(b.Payload))
			end = b.End.Off
			return nil
		})
		if err != nil {
			t.Fatalf("ReadFile of a file in memory: %v", err)
		}
		if len(got) < len(want) {
			t.Fatalf("read %d blocks, %d valid ones were written first", len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("block %d differs from the one written", i)
			}
		}
		if tail.Pos.Off != end || tail.Size != int64(len(data)) {
			t.Fatalf("tail %+v, blocks end at %d in %d bytes", tail, end, len(data))
		}
		last := int64(-1) // the last nonzero byte after the blocks
		if i := lastNonzero(data[end:]); i >= 0 {
			last = end + int64(i)
		}
		switch {
		case last < 0 && (tail.Reason != "" || tail.Unread != 0):
			t.Fatalf("only zeros follow the blocks, yet tail %+v", tail)
		case last >= 0 && (tail.Reason == "" || tail.Unread != last+1-end):
			t.Fatalf("a nonzero byte at %d follows the blocks, yet tail %+v", last, tail)
		}
	})
}

// lastNonzero returns the index of the last nonzero byte of b, or -1.
func lastNonzero(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] != 0 {
			return i
		}
	}
	return -1
}
