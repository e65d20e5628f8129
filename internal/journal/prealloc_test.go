package journal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

func fileSize(t *testing.T, fs vfs.FS, gen uint64) int64 {
	t.Helper()
	st, err := fs.Stat(fs.PathJoin("j", FileName(gen)))
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// The writer keeps the file extended with zeros at least half its distance
// ahead past its data and at most that distance (which grows with the file,
// from 1/64 of the Prealloc to all of it), and a reader ends the log at the
// last block as if the zeros were not there, across rotations.
func TestPreallocatedFileReadsToItsLastBlock(t *testing.T) {
	const prealloc = 4096
	fs := vfs.NewMem()
	_ = fs.MkdirAll("j", 0o755)
	w, err := Create(fs, "j", 1, Options{Prealloc: prealloc})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	want := map[uint64][][]byte{}
	for i := 0; i < 300; i++ {
		if i%100 == 99 {
			if _, err := w.Rotate(); err != nil {
				t.Fatal(err)
			}
		}
		gen := w.Gen()
		// Sizes up to twice the Prealloc: some blocks jump past the zeros.
		p := make([]byte, 1+r.IntN(2*prealloc))
		for j := range p {
			p[j] = byte(1 + r.IntN(255))
		}
		want[gen] = append(want[gen], p)
		end, err := w.Append(block(gen, p))
		if err != nil {
			t.Fatal(err)
		}
		ahead := min(prealloc, max(prealloc/64, end.Off))
		if size := fileSize(t, fs, gen); size < end.Off+ahead/2 || size > end.Off+ahead {
			t.Fatalf("block %d: file is %d bytes with data to %d; want %d..%d", i, size, end.Off, end.Off+ahead/2, end.Off+ahead)
		}
		got, tail := readAll(t, fs, gen)
		if len(got) != len(want[gen]) || tail.Reason != "" || tail.Pos != end {
			t.Fatalf("block %d: read %d blocks of %d, tail %+v, want a clean end at %v", i, len(got), len(want[gen]), tail, end)
		}
		for j := range got {
			if !bytes.Equal(got[j], want[gen][j]) {
				t.Fatalf("gen %d block %d differs", gen, j)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// Only zeros to the end of the file end the log cleanly: anything else after
// a zero header (a later page of a block that did reach the disk while its
// first did not) is reported.
func TestZeroHeaderWithDataAfterIsReported(t *testing.T) {
	fs := vfs.NewMem()
	_ = fs.MkdirAll("j", 0o755)
	w, _ := Create(fs, "j", 1, Options{Prealloc: 8192})
	end, err := w.Append(block(1, []byte("kept")))
	if err != nil {
		t.Fatal(err)
	}
	f, err := fs.OpenReadWrite(fs.PathJoin("j", FileName(1)), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{7}, end.Off+5000); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	got, tail := readAll(t, fs, 1)
	if len(got) != 1 || tail.Pos != end || tail.Reason != "a zero block header with data after it" {
		t.Fatalf("read %d blocks, tail %+v", len(got), tail)
	}
}

// A crash keeps every synced block of a preallocated file, reads back as a
// prefix of what was appended, and never leaves a state the reader fails on.
func TestCrashPreallocatedFile(t *testing.T) {
	for seed := uint64(0); seed < 50; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			_ = mem.MkdirAll("j", 0o755)
			d, _ := mem.OpenDir("")
			_ = d.Sync()
			_ = d.Close()
			w, err := Create(mem, "j", 1, Options{Prealloc: 1024})
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(seed, 9))
			var written [][]byte
			synced := 0
			for i := 0; i < 40; i++ {
				p := bytes.Repeat([]byte{byte(1 + i)}, 1+r.IntN(700))
				written = append(written, p)
				e, err := w.Append(block(1, p))
				if err != nil {
					t.Fatal(err)
				}
				if r.IntN(4) == 0 {
					if err := w.SyncTo(e); err != nil {
						t.Fatal(err)
					}
					synced = len(written)
				}
			}
			crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(seed, 1))})
			got, tail := readAll(t, crashed, 1)
			if len(got) < synced || len(got) > len(written) {
				t.Fatalf("read %d blocks; %d were synced, %d written (tail %+v)", len(got), synced, len(written), tail)
			}
			for i := range got {
				if !bytes.Equal(got[i], written[i]) {
					t.Fatalf("block %d differs", i)
				}
			}
		})
	}
}

// The zeros are only there to make fsyncs cheaper: a failure to write them
// fails no append, turns preallocation off for that file, and leaves every
// block readable.
func TestFailedPreallocIsNotTheJournals(t *testing.T) {
	mem := vfs.NewMem()
	_ = mem.MkdirAll("j", 0o755)
	var dataEnd int64
	injected := 0
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileWriteAt && op.Offset >= dataEnd && injected == 0 {
			injected++
			return errors.New("injected: no space for zeros")
		}
		return nil
	}))
	var told []uint64
	w, err := Create(fs, "j", 1, Options{Prealloc: 4096, PreallocFailed: func(gen uint64, err error) {
		told = append(told, gen)
	}})
	if err != nil {
		t.Fatal(err)
	}
	var end Pos
	for i := 0; i < 20; i++ {
		b := block(1, bytes.Repeat([]byte{byte(i + 1)}, 300))
		// The data's own write starts before dataEnd; only the zeros past it
		// are failed.
		dataEnd = end.Off + int64(len(b))
		if end, err = w.Append(b); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		if err := w.SyncTo(end); err != nil {
			t.Fatal(err)
		}
	}
	if injected != 1 || len(told) != 1 || told[0] != 1 {
		t.Fatalf("%d zero writes failed, PreallocFailed told of %v; want 1 and [1]", injected, told)
	}
	if size := fileSize(t, mem, 1); size != end.Off {
		t.Fatalf("file is %d bytes after preallocation failed, want %d (no more zeros)", size, end.Off)
	}
	got, tail := readAll(t, mem, 1)
	if len(got) != 20 || tail.Reason != "" || tail.Pos != end {
		t.Fatalf("read %d blocks, tail %+v", len(got), tail)
	}
}

func TestNegativePreallocRefused(t *testing.T) {
	fs := vfs.NewMem()
	_ = fs.MkdirAll("j", 0o755)
	if _, err := Create(fs, "j", 1, Options{Prealloc: -1}); err == nil {
		t.Fatal("Create accepted a negative preallocation")
	}
}

// Rotating writes out the old file's blocks without zeros after them: that
// file grows no more, and the fsync that covers it should not carry them.
func TestRotateDoesNotExtendTheOldFile(t *testing.T) {
	fs := vfs.NewMem()
	_ = fs.MkdirAll("j", 0o755)
	w, _ := Create(fs, "j", 1, Options{Prealloc: 4096})
	end := w.AppendBuffered(block(1, []byte("buffered until the rotation")))
	if _, err := w.Rotate(); err != nil {
		t.Fatal(err)
	}
	if size := fileSize(t, fs, 1); size != end.Off {
		t.Fatalf("rotated-away file is %d bytes, its blocks end at %d", size, end.Off)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
