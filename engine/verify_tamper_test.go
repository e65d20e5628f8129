package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Tamper evidence, exhaustively on a small database: every single byte of
// every segment file flipped in turn, every file cut at several points,
// frames swapped, a frame copied into another anchor's segment. After each
// change a freshly opened database must verify with at least one finding of
// the right code naming the right anchor, file and offset (the offset of the
// damaged frame: 0 for the header, the seal's for the seal) — and Verify
// must neither panic nor fail.
//
// The database is closed cleanly before each change, so Open trusts it and
// reads no segment: what the damage does is found by Verify alone.

// tamperFile is one pristine segment file and its layout.
type tamperFile struct {
	path   string
	anchor string
	data   []byte
	hsize  int64
	frames []segment.Frame // Record fields alias data
	seal   int64           // offset of the seal, -1 if unsealed
}

// region returns what a finding about byte off must look like.
func (f *tamperFile) region(off int64) (errs.Code, int64, uint64) {
	if off < f.hsize {
		return errs.CodeHashMismatch, 0, 0
	}
	if f.seal >= 0 && off >= f.seal {
		return errs.CodeChainBroken, f.seal, 0
	}
	for _, fr := range f.frames {
		if off >= fr.Offset && off < fr.Offset+int64(fr.Size) {
			return errs.CodeHashMismatch, fr.Offset, fr.Record.Seq
		}
	}
	panic(fmt.Sprintf("offset %d of %s in no region", off, f.path))
}

// cutRegion is where a finding about the file cut at off must point: the
// first frame (or header, or seal) that the cut damages or removes.
func (f *tamperFile) cutRegion(off int64) int64 {
	if off < f.hsize {
		return 0
	}
	for _, fr := range f.frames {
		if off < fr.Offset+int64(fr.Size) {
			return fr.Offset
		}
	}
	return f.seal
}

func tamperOptions(fs vfs.FS) Options {
	return Options{FS: fs, SegmentSize: 4096, PebbleOptions: func(o *pebble.Options) { o.MemTableSize = 1 << 20 }}
}

// buildTamperDB writes 3 anchors and a few hundred records (puts, deletes,
// events, idempotency keys), closes cleanly and returns the segment files.
func buildTamperDB(t testing.TB, fs *vfs.MemFS) []*tamperFile {
	t.Helper()
	ctx := context.Background()
	db := mustOpen(t, fs, tamperOptions(fs))
	anchors := []string{"dev-a", "dev-b", "dev-c"}
	for i := 0; i < 210; i++ {
		a := anchors[i%3]
		e := Entry{Anchor: a, Type: segment.TypePut, Key: []byte(fmt.Sprintf("k%d", i%9)), Value: []byte(fmt.Sprintf("v%d", i))}
		switch i % 10 {
		case 3:
			e.Type, e.Value = segment.TypeDelete, nil
		case 5:
			e.Type, e.Key = "TELEMETRY", nil
		case 7:
			e.IdempotencyKey = []byte(fmt.Sprintf("op-%d", i))
		}
		if _, err := db.Append(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	var files []*tamperFile
	sealed, active := 0, 0
	for _, a := range anchors {
		dir := segment.AnchorDir(fs, "db", a)
		names, err := fs.List(dir)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(names)
		for _, n := range names {
			if _, ok := segment.ParseFileName(n); !ok {
				continue
			}
			path := fs.PathJoin(dir, n)
			data, err := testutil.ReadFile(fs, path)
			if err != nil {
				t.Fatal(err)
			}
			tf := &tamperFile{path: path, anchor: a, data: data, seal: -1}
			sc, err := segment.NewScanner(bytes.NewReader(data), int64(len(data)))
			if err != nil {
				t.Fatal(err)
			}
			tf.hsize = int64(sc.HeaderSize)
			for {
				fr, err := sc.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				fr.Record = fr.Record.Clone()
				tf.frames = append(tf.frames, fr)
			}
			if sc.Footer() != nil {
				tf.seal = int64(len(data)) - segment.FooterSize
				sealed++
			} else {
				active++
			}
			files = append(files, tf)
		}
	}
	if sealed == 0 || active == 0 {
		t.Fatalf("want sealed and active segments, have %d and %d", sealed, active)
	}
	return files
}

// tamperCase is one damage: apply changes the files, want says what a
// finding must look like.
type tamperCase struct {
	name   string
	file   string // the file changed (restored afterwards)
	data   []byte // its damaged content
	anchor string
	code   errs.Code
	offset int64
	// alsoFile, if set, is a second file to restore.
	alsoFile string
	alsoData []byte
}

func tamperCases(files []*tamperFile, stride int) []tamperCase {
	var cases []tamperCase
	for _, f := range files {
		for off := int64(0); off < int64(len(f.data)); off += int64(stride) {
			d := slices.Clone(f.data)
			d[off] ^= 0x5A
			code, at, _ := f.region(off)
			cases = append(cases, tamperCase{name: fmt.Sprintf("flip %s@%d", f.path, off), file: f.path, data: d, anchor: f.anchor, code: code, offset: at})
		}
		// Cuts: inside the header, at its end, inside and at the end of
		// frames, inside and at the seal, one byte short.
		cuts := []int64{0, 1, f.hsize - 1, f.hsize, int64(len(f.data)) - 1}
		for i, fr := range f.frames {
			if i%3 == 0 || i == len(f.frames)-1 {
				cuts = append(cuts, fr.Offset+1, fr.Offset+int64(fr.Size)/2, fr.Offset+int64(fr.Size)-1)
			}
			if i%4 == 1 && i < len(f.frames)-1 {
				cuts = append(cuts, fr.Offset) // a frame boundary
			}
		}
		if f.seal >= 0 {
			cuts = append(cuts, f.seal, f.seal+7)
		}
		for _, cut := range cuts {
			if cut < 0 || cut >= int64(len(f.data)) {
				continue
			}
			cases = append(cases, tamperCase{name: fmt.Sprintf("cut %s@%d", f.path, cut), file: f.path, data: slices.Clone(f.data[:cut]),
				anchor: f.anchor, code: errs.CodeChainBroken, offset: f.cutRegion(cut)})
		}
		// Swaps: adjacent frames, and the first with the last.
		for i := 0; i+1 < len(f.frames); i += 5 {
			cases = append(cases, swapCase(f, i, i+1))
		}
		if n := len(f.frames); n > 2 {
			cases = append(cases, swapCase(f, 0, n-1))
		}
	}
	// A frame of one anchor copied into another's segment: over a frame of
	// the same size, between two frames, and after the last.
	for _, src := range files {
		for _, dst := range files {
			if src.anchor == dst.anchor || len(src.frames) == 0 || len(dst.frames) < 2 {
				continue
			}
			fr := src.frames[len(src.frames)/2]
			frame := src.data[fr.Offset : fr.Offset+int64(fr.Size)]
			for _, at := range dst.frames {
				if at.Size == fr.Size {
					d := slices.Clone(dst.data)
					copy(d[at.Offset:], frame)
					cases = append(cases, tamperCase{name: fmt.Sprintf("copy %s@%d over %s@%d", src.path, fr.Offset, dst.path, at.Offset),
						file: dst.path, data: d, anchor: dst.anchor, code: errs.CodeHashMismatch, offset: at.Offset})
					break
				}
			}
			mid := dst.frames[len(dst.frames)/2].Offset
			d := append(append(slices.Clone(dst.data[:mid]), frame...), dst.data[mid:]...)
			cases = append(cases, tamperCase{name: fmt.Sprintf("insert %s@%d into %s@%d", src.path, fr.Offset, dst.path, mid),
				file: dst.path, data: d, anchor: dst.anchor, code: errs.CodeHashMismatch, offset: mid})
			code := errs.CodeHashMismatch
			if dst.seal >= 0 {
				code = errs.CodeChainBroken // bytes after a seal
			}
			cases = append(cases, tamperCase{name: fmt.Sprintf("append %s@%d to %s", src.path, fr.Offset, dst.path),
				file: dst.path, data: append(slices.Clone(dst.data), frame...), anchor: dst.anchor, code: code, offset: int64(len(dst.data))})
		}
	}
	return cases
}

func swapCase(f *tamperFile, i, j int) tamperCase {
	a, b := f.frames[i], f.frames[j]
	fa := f.data[a.Offset : a.Offset+int64(a.Size)]
	fb := f.data[b.Offset : b.Offset+int64(b.Size)]
	var d []byte
	d = append(d, f.data[:a.Offset]...)
	d = append(d, fb...)
	d = append(d, f.data[a.Offset+int64(a.Size):b.Offset]...)
	d = append(d, fa...)
	d = append(d, f.data[b.Offset+int64(b.Size):]...)
	return tamperCase{name: fmt.Sprintf("swap %s frames %d,%d", f.path, i, j), file: f.path, data: d, anchor: f.anchor, code: errs.CodeChainBroken, offset: a.Offset}
}

// runTamper applies c to fs, verifies a fresh database and restores fs.
func runTamper(t testing.TB, fs *vfs.MemFS, c tamperCase, pristine []byte) error {
	testutil.WriteFile(fs, c.file, c.data)
	defer testutil.WriteFile(fs, c.file, pristine)
	db, err := Open("db", tamperOptions(fs))
	if err != nil {
		return fmt.Errorf("open: %v", err)
	}
	rep, err := db.Verify(context.Background(), VerifyOptions{Threads: 1})
	if cerr := db.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("verify failed: %v", err)
	}
	if rep.OK || len(rep.Failures) == 0 {
		return fmt.Errorf("no finding")
	}
	for _, f := range rep.Failures {
		if f.Code == c.code && f.Anchor == c.anchor && f.File == c.file && f.Offset == c.offset {
			return nil
		}
	}
	return fmt.Errorf("want %s at %s@%d (anchor %s), got %v", c.code, c.file, c.offset, c.anchor, rep.Failures)
}

func TestVerifyTamperEvidence(t *testing.T) {
	base := vfs.NewMem()
	files := buildTamperDB(t, base)
	stride := 1
	switch {
	case testutil.RaceEnabled:
		// The race detector makes each case ten times slower, and what it
		// looks for (two workers verifying side by side) shows in a few
		// hundred cases; make test's run without it visits every case.
		stride = 101
	case testing.Short():
		stride = 13
	}
	cases := tamperCases(files, stride)
	pristine := make(map[string][]byte, len(files))
	for _, f := range files {
		pristine[f.path] = f.data
	}
	// The pristine database verifies clean.
	if err := runTamper(t, base, tamperCase{file: files[0].path, data: files[0].data}, files[0].data); err == nil || err.Error() != "no finding" {
		t.Fatalf("pristine database: %v", err)
	}
	workers := 2
	var next atomic.Int64
	var mu sync.Mutex
	var misses []string
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		fs := vfs.NewMem()
		if err := testutil.CopyTree(base, "", fs, ""); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(cases) {
					return
				}
				c := cases[i]
				if err := runTamper(t, fs, c, pristine[c.file]); err != nil {
					mu.Lock()
					misses = append(misses, fmt.Sprintf("%s: %v", c.name, err))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d tamper cases over %d segment files in %v", len(cases), len(files), time.Since(start))
	if len(misses) > 0 {
		for i, m := range misses {
			if i == 20 {
				t.Errorf("… and %d more", len(misses)-20)
				break
			}
			t.Error(m)
		}
		t.Fatalf("%d of %d tamper cases missed", len(misses), len(cases))
	}
}
