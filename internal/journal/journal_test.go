package journal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"pgregory.net/rapid"
)

func block(gen uint64, payload []byte) []byte {
	b := append(make([]byte, HeaderSize), payload...)
	Frame(b, gen)
	return b
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func readAll(t *testing.T, fs vfs.FS, gen uint64) ([][]byte, Tail) {
	t.Helper()
	var got [][]byte
	tail, err := ReadFile(fs, "j", gen, 0, func(b Block) error {
		got = append(got, bytes.Clone(b.Payload))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, tail
}

func TestRoundTripAndBuffering(t *testing.T) {
	fs := vfs.NewMem()
	_ = fs.MkdirAll("j", 0o755)
	w, err := Create(fs, "j", 7, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var want [][]byte
	var last Pos
	for i := 0; i < 50; i++ {
		p := []byte(fmt.Sprintf("payload-%d-%s", i, bytes.Repeat([]byte{'x'}, i)))
		want = append(want, p)
		if i%3 == 0 {
			if last, err = w.Append(block(7, p)); err != nil {
				t.Fatal(err)
			}
		} else {
			last = w.AppendBuffered(block(7, p))
		}
	}
	if err := w.SyncTo(last); err != nil {
		t.Fatal(err)
	}
	if last != w.End() {
		t.Fatalf("end %v, last %v", w.End(), last)
	}
	got, tail := readAll(t, fs, 7)
	if len(got) != len(want) || tail.Reason != "" || tail.Pos != last {
		t.Fatalf("read %d blocks, tail %+v, want %d ending %v", len(got), tail, len(want), last)
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("block %d differs", i)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// Every truncation and every byte flip of a journal file, with and without
// preallocated zeros, ends the log at the last whole block before the
// damage; cuts and flips among the zeros lose no block, a cut there is a
// clean end (any number of zeros is, also fewer than a header), and a flip
// there is reported with only the bytes up to it counted as unread. A valid
// block of another generation where the next block would go does not pass
// for one of this file.
func TestTornAndForeignBlocksEndTheLog(t *testing.T) {
	forEachPrealloc(t, testTornAndForeignBlocks)
}

func testTornAndForeignBlocks(t *testing.T, o Options) {
	fs := vfs.NewMem()
	_ = fs.MkdirAll("j", 0o755)
	w, _ := Create(fs, "j", 1, o)
	var ends []Pos
	for i := 0; i < 5; i++ {
		e, err := w.Append(block(1, []byte(fmt.Sprintf("block %d", i))))
		if err != nil {
			t.Fatal(err)
		}
		ends = append(ends, e)
	}
	_ = w.Close()
	dataEnd := ends[len(ends)-1].Off
	path := "j/" + FileName(1)
	data, _ := fs.UnsafeGetFileDataBuffer(path)
	orig := bytes.Clone(data)
	if o.Prealloc > 0 && int64(len(orig)) < dataEnd+8 {
		t.Fatalf("file of %d bytes, blocks to %d: not preallocated", len(orig), dataEnd)
	}
	write := func(b []byte) {
		f, _ := fs.Create(path, vfs.WriteCategoryUnspecified)
		_, _ = f.Write(bytes.Clone(b))
		_ = f.Close()
	}
	for cut := 0; cut <= len(orig); cut++ {
		write(orig[:cut])
		got, tail := readAll(t, fs, 1)
		whole, from := 0, int64(0)
		for _, e := range ends {
			if e.Off <= int64(cut) {
				whole, from = whole+1, e.Off
			}
		}
		// Clean exactly when only zeros follow the last whole block: the
		// preallocation, or the zero first bytes of a torn length (a reader
		// cannot tell them apart).
		clean := allZero(orig[from:cut])
		if len(got) != whole || (tail.Reason == "") != clean {
			t.Fatalf("cut at %d: read %d blocks (want %d), tail %+v (clean: want %v)", cut, len(got), whole, tail, clean)
		}
	}
	for i := range orig {
		b := bytes.Clone(orig)
		b[i] ^= 0x40
		write(b)
		got, tail := readAll(t, fs, 1)
		if tail.Reason == "" {
			t.Fatalf("flip at %d: not reported (read %d blocks)", i, len(got))
		}
		if int64(i) < dataEnd {
			// Caught by the checksum: the log ends at that block.
			if len(got) >= 5 {
				t.Fatalf("flip at %d in the blocks: read %d blocks", i, len(got))
			}
			continue
		}
		if len(got) != 5 || tail.Pos.Off != dataEnd || tail.Unread != int64(i)+1-dataEnd {
			t.Fatalf("flip at %d among the zeros: read %d blocks, tail %+v, want 5 blocks ending at %d with %d unread", i, len(got), tail, dataEnd, int64(i)+1-dataEnd)
		}
	}
	write(append(bytes.Clone(orig[:dataEnd]), block(2, []byte("from gen 2"))...))
	got, tail := readAll(t, fs, 1)
	if len(got) != 5 || tail.Reason != "checksum mismatch" {
		t.Fatalf("foreign block: %d blocks, tail %+v", len(got), tail)
	}
}

// preallocs are the Options the writer tests run under: without zeros, and
// with a preallocation small enough that blocks cross it all the time.
var preallocs = []Options{{}, {Prealloc: 512}}

// forEachPrealloc runs test as a subtest under each of preallocs.
func forEachPrealloc(t *testing.T, test func(*testing.T, Options)) {
	for _, o := range preallocs {
		t.Run(fmt.Sprint("prealloc=", o.Prealloc), func(t *testing.T) { test(t, o) })
	}
}

func TestRotateSyncsOldFile(t *testing.T) {
	forEachPrealloc(t, testRotateSyncsOldFile)
}

func testRotateSyncsOldFile(t *testing.T, o Options) {
	mem := vfs.NewCrashableMem()
	_ = mem.MkdirAll("j", 0o755)
	d, _ := mem.OpenDir("")
	_ = d.Sync()
	_ = d.Close()
	w, err := Create(mem, "j", 1, o)
	if err != nil {
		t.Fatal(err)
	}
	w.AppendBuffered(block(1, []byte("old")))
	next, err := w.Rotate()
	if err != nil || next != (Pos{Gen: 2}) {
		t.Fatalf("rotate: %v %v", next, err)
	}
	e := w.AppendBuffered(block(2, []byte("new")))
	if err := w.SyncTo(e); err != nil {
		t.Fatal(err)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	got1, _ := readAll(t, crashed, 1)
	got2, _ := readAll(t, crashed, 2)
	if len(got1) != 1 || len(got2) != 1 {
		t.Fatalf("after crash: gen1 %d blocks, gen2 %d blocks", len(got1), len(got2))
	}
	gens, _ := List(crashed, "j")
	if fmt.Sprint(gens) != "[1 2]" {
		t.Fatalf("gens %v", gens)
	}
	if err := RemoveBefore(mem, "j", 2); err != nil {
		t.Fatal(err)
	}
	if gens, _ := List(mem, "j"); fmt.Sprint(gens) != "[2]" {
		t.Fatalf("after RemoveBefore: %v", gens)
	}
}

func TestConcurrentSyncers(t *testing.T) {
	forEachPrealloc(t, testConcurrentSyncers)
}

func testConcurrentSyncers(t *testing.T, o Options) {
	fs := vfs.NewMem()
	_ = fs.MkdirAll("j", 0o755)
	w, _ := Create(fs, "j", 1, o)
	done := make(chan error)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200; i++ {
		e := w.AppendBuffered(block(1, make([]byte, 1+r.IntN(300))))
		go func() { done <- w.SyncTo(e) }()
	}
	for i := 0; i < 200; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	got, tail := readAll(t, fs, 1)
	if len(got) != 200 || tail.Reason != "" {
		t.Fatalf("read %d, tail %+v", len(got), tail)
	}
}

// Rotations with no sync in between, while other goroutines sync: a
// SyncTo fsyncs the previous file outside the writer's mutex, so a second
// Rotate must not close that file under it (found by -race in the engine's
// recovery tests once the index flush stopped syncing the whole journal).
func TestRotateWhileSyncing(t *testing.T) {
	forEachPrealloc(t, testRotateWhileSyncing)
}

// testRotateWhileSyncing also mixes in Appends (the NoSync path, which
// writes and extends the file in the leader while syncers flush).
func testRotateWhileSyncing(t *testing.T, o Options) {
	// Crashable: its files track their data, so a sync of a closed file
	// fails loudly (a plain MemFS file's Sync does nothing at all).
	fs := vfs.NewCrashableMem()
	_ = fs.MkdirAll("j", 0o755)
	w, err := Create(fs, "j", 1, o)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	const syncers = 4
	errc := make(chan error, syncers)
	for s := 0; s < syncers; s++ {
		go func() {
			for {
				select {
				case <-stop:
					errc <- nil
					return
				default:
				}
				if err := w.SyncTo(w.End()); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	blocks := map[uint64]int{} // blocks appended per generation
	for i := 0; i < 3000; i++ {
		w.AppendBuffered(block(w.Gen(), []byte(fmt.Sprint("record ", i))))
		blocks[w.Gen()]++
		if i%3 == 0 {
			if _, err := w.Append(block(w.Gen(), bytes.Repeat([]byte{'a'}, i%700+1))); err != nil {
				t.Fatal(err)
			}
			blocks[w.Gen()]++
		}
		if i%2 == 0 {
			if _, err := w.Rotate(); err != nil {
				t.Fatal(err)
			}
		}
		if i%100 == 0 {
			// Old generations are removed as a settle would.
			if err := RemoveBefore(fs, "j", w.Gen()-1); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	for s := 0; s < syncers; s++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// Every file left reads back whole, to a clean end: no zeros landed on
	// a block.
	gens, err := List(fs, "j")
	if err != nil || len(gens) == 0 {
		t.Fatalf("list: %v %v", gens, err)
	}
	for _, g := range gens {
		got, tail := readAll(t, fs, g)
		if len(got) != blocks[g] || tail.Reason != "" {
			t.Fatalf("gen %d: read %d blocks of %d, tail %+v", g, len(got), blocks[g], tail)
		}
	}
}

// A block whose write failed must never be reported durable. Rotate's write
// of the buffered blocks failed and dropped them; a SyncTo covering them
// then found nothing buffered, fsynced the file and said yes, and the engine
// acknowledged appends that were in no file (TestErrorInjection/writes, op
// 95, once under -race).
func TestFailedWriteIsNeverSynced(t *testing.T) {
	for _, name := range []string{"rotate", "flush"} {
		t.Run(name, func(t *testing.T) {
			mem, fs, fail := failingFS(errorfs.OpFileWriteAt, "injected: write failed")
			for _, prealloc := range []int64{0, 4096} {
				fail.Store(false)
				_ = mem.RemoveAll("j")
				_ = mem.MkdirAll("j", 0o755)
				w, err := Create(fs, "j", 1, Options{Prealloc: prealloc})
				if err != nil {
					t.Fatal(err)
				}
				first, err := w.Append(block(1, []byte("written and synced")))
				if err != nil {
					t.Fatal(err)
				}
				if err := w.SyncTo(first); err != nil {
					t.Fatal(err)
				}
				lost := w.AppendBuffered(block(1, []byte("its write fails")))
				fail.Store(true)
				if name == "rotate" {
					_, err = w.Rotate()
				} else {
					err = w.Flush()
				}
				if err == nil {
					t.Fatalf("prealloc %d: the failed write was not reported", prealloc)
				}
				fail.Store(false)
				if err := w.SyncTo(lost); err == nil {
					t.Fatalf("prealloc %d: SyncTo says a block whose write failed is durable", prealloc)
				}
				if err := w.Sync(); err == nil {
					t.Fatalf("prealloc %d: Sync succeeded after a failed write", prealloc)
				}
				if _, err := w.Append(block(1, []byte("after"))); err == nil {
					t.Fatalf("prealloc %d: Append succeeded after a failed write", prealloc)
				}
				_ = w.Close()
			}
		})
	}
}

// TestFailedSyncIsNeverRetried: after a failed fdatasync the kernel may have
// dropped the pages it covered, so a later fsync that succeeds proves
// nothing about them. Every later SyncTo, Sync, Append and Rotate fails
// with the first failure, whether the fsync failed in SyncTo or in a
// Rotate syncing the previous file.
func TestFailedSyncIsNeverRetried(t *testing.T) {
	for _, name := range []string{"syncto", "rotate"} {
		t.Run(name, func(t *testing.T) {
			_, fs, fail := failingFS(errorfs.OpFileSyncData, "injected: fdatasync failed")
			w, err := Create(fs, "j", 1, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			first, err := w.Append(block(1, []byte("written and synced")))
			if err != nil {
				t.Fatal(err)
			}
			if err := w.SyncTo(first); err != nil {
				t.Fatal(err)
			}
			lost, err := w.Append(block(1, []byte("its fsync fails")))
			if err != nil {
				t.Fatal(err)
			}
			fail.Store(true)
			if name == "rotate" {
				// The first Rotate leaves the file unsynced as the old one; the
				// second must sync it, and that fails.
				if _, err := w.Rotate(); err != nil {
					t.Fatal(err)
				}
				_, err = w.Rotate()
			} else {
				err = w.SyncTo(lost)
			}
			if err == nil {
				t.Fatal("the failed fsync was not reported")
			}
			fail.Store(false)
			if err := w.SyncTo(lost); err == nil {
				t.Fatal("SyncTo succeeded after a failed fsync")
			}
			if err := w.Sync(); err == nil {
				t.Fatal("Sync succeeded after a failed fsync")
			}
			if _, err := w.Append(block(1, []byte("after"))); err == nil {
				t.Fatal("Append succeeded after a failed fsync")
			}
		})
	}
}

// failingFS is a MemFS holding directory "j", and the same FS failing every
// operation of kind with msg while fail is set.
func failingFS(kind errorfs.OpKind, msg string) (mem *vfs.MemFS, fs vfs.FS, fail *atomic.Bool) {
	mem = vfs.NewMem()
	_ = mem.MkdirAll("j", 0o755)
	fail = new(atomic.Bool)
	fs = errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == kind && fail.Load() {
			return errors.New(msg)
		}
		return nil
	}))
	return mem, fs, fail
}

// TestDecodePosRoundTrip: whatever DecodePos accepts encodes back to the
// same bytes (the engine's settle point row has one encoding per value, so
// a damaged row cannot read as a sound one).
func TestDecodePosRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := rapid.SliceOfN(rapid.SampledFrom([]byte{0, 1, 0x7F, 0x80, 0xFF}), 0, 20).Draw(t, "b")
		if p, err := DecodePos(b); err == nil && !bytes.Equal(p.AppendBinary(nil), b) {
			t.Fatalf("%x decodes as %v, which encodes to other bytes", b, p)
		}
	})
}

// TestDecodePosExact: a position is the 16 bytes AppendBinary writes, at an
// offset that is not negative. A longer one (the engine's settle-point row,
// damaged) was read from its first 16 bytes, hiding the damage, and one with
// the offset's top bit set read as a negative offset. Found writing
// FuzzIndexRows.
func TestDecodePosExact(t *testing.T) {
	b := Pos{Gen: 3, Off: 4096}.AppendBinary(nil)
	if p, err := DecodePos(b); err != nil || p != (Pos{Gen: 3, Off: 4096}) {
		t.Fatalf("as encoded: %+v, %v", p, err)
	}
	neg := Pos{Gen: 3, Off: -1}.AppendBinary(nil)
	for _, bad := range [][]byte{b[:15], append(b, 0), nil, neg} {
		if p, err := DecodePos(bad); err == nil {
			t.Errorf("%x: decoded as %+v", bad, p)
		}
	}
}
