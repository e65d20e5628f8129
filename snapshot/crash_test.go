package snapshot

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// hookFS calls hook before and after every mutating operation, so a test can
// take a crash clone at each point of a Create.
type hookFS struct {
	vfs.FS
	hook func(op string)
}

func (h *hookFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	h.hook("create " + name)
	f, err := h.FS.Create(name, c)
	if err != nil {
		return nil, err
	}
	h.hook("created " + name)
	return &hookFile{File: f, fs: h}, nil
}

func (h *hookFS) Rename(from, to string) error {
	h.hook("rename")
	err := h.FS.Rename(from, to)
	h.hook("renamed")
	return err
}

func (h *hookFS) Remove(name string) error {
	h.hook("remove " + name)
	err := h.FS.Remove(name)
	h.hook("removed " + name)
	return err
}

func (h *hookFS) OpenDir(name string) (vfs.File, error) {
	f, err := h.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return &hookFile{File: f, fs: h}, nil
}

type hookFile struct {
	vfs.File
	fs *hookFS
}

func (f *hookFile) Write(p []byte) (int, error) {
	f.fs.hook("write")
	n, err := f.File.Write(p)
	f.fs.hook("wrote")
	return n, err
}

func (f *hookFile) Sync() error {
	f.fs.hook("sync")
	err := f.File.Sync()
	f.fs.hook("synced")
	return err
}

// checkCrashState asserts what a crash may leave in dir: temp files, or one
// complete snapshot under its final name, nothing else.
func checkCrashState(t *testing.T, fs vfs.FS, dir, point string) (complete bool) {
	t.Helper()
	list, err := List(fs, dir)
	if err != nil {
		t.Fatalf("%s: List: %v", point, err)
	}
	for _, info := range list {
		if info.Err != nil {
			t.Fatalf("%s: partial snapshot under a final name: %v", point, info.Err)
		}
		if _, err := Verify(fs, info.Path); err != nil {
			t.Fatalf("%s: snapshot %s does not verify: %v", point, info.Name, err)
		}
	}
	if len(list) > 1 {
		t.Fatalf("%s: %d snapshots from one Create", point, len(list))
	}
	return len(list) == 1
}

// TestCreateCrashSafety crashes a Create at every write, sync, rename and
// remove, and every 500 entries, keeping each unsynced block and directory
// entry with probability 0%, 50% or 100%, and checks every crash image.
func TestCreateCrashSafety(t *testing.T) {
	mem := vfs.NewCrashableMem()
	rng := rand.New(rand.NewPCG(7, 7))
	type image struct {
		point string
		fs    *vfs.MemFS
	}
	var mu sync.Mutex
	var images []image
	crash := func(op string) {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range []int{0, 50, 100} {
			cfg := vfs.CrashCloneCfg{UnsyncedDataPercent: p, RNG: rng}
			images = append(images, image{fmt.Sprintf("%s (keep %d%%)", op, p), mem.CrashClone(cfg)})
		}
	}
	fs := &hookFS{FS: mem, hook: crash}
	fr, entries := testState(20000)
	seq := func(yield func(Entry, error) bool) {
		for i, e := range entries {
			if i%500 == 0 {
				crash(fmt.Sprintf("entry %d", i))
			}
			if !yield(e, nil) {
				return
			}
		}
	}
	info, err := Create(fs, "db/snapshots", Meta{Frontier: fr, Created: testCreated}, seq)
	if err != nil {
		t.Fatal(err)
	}
	crash("returned")
	var renamed bool
	completes := 0
	for _, im := range images {
		if strings.HasPrefix(im.point, "renamed") {
			renamed = true
		}
		complete := checkCrashState(t, im.fs, "db/snapshots", im.point)
		if complete {
			completes++
		}
		if complete && !renamed && !strings.HasPrefix(im.point, "renamed") {
			t.Fatalf("%s: a snapshot appeared before the rename", im.point)
		}
	}
	last := images[len(images)-3] // "returned", keep 0%
	if !checkCrashState(t, last.fs, "db/snapshots", last.point) {
		t.Fatal("a crash after Create returned lost the snapshot")
	}
	t.Logf("%d crash images at %d points, %d with the complete snapshot %s", len(images), len(images)/3, completes, info.Name)
}

// TestCreateFailureInjection fails the i-th filesystem operation of a Create
// for every i until Create succeeds, and checks each failure is IO_001 and
// leaves no snapshot behind.
func TestCreateFailureInjection(t *testing.T) {
	fr, entries := testState(2000)
	for i := int32(0); ; i++ {
		mem := vfs.NewMem()
		fs := errorfs.Wrap(mem, errorfs.OnIndex(i))
		info, err := Create(fs, "s", Meta{Frontier: fr, Created: testCreated}, seqOf(entries))
		if err == nil {
			if _, err := Verify(mem, info.Path); err != nil {
				t.Fatal(err)
			}
			t.Logf("Create needs %d filesystem operations", i)
			return
		}
		e := testutil.WantCode(t, err, errs.CodeWriteFailed)
		list, _ := List(mem, "s")
		for _, l := range list {
			// Only a failed directory fsync after the rename may leave the
			// (complete) file, and the error says so.
			if !strings.Contains(e.Message, "directory fsync failed") {
				t.Fatalf("op %d failed (%v) and left %s", i, err, l.Name)
			}
			if _, err := Verify(mem, l.Path); err != nil {
				t.Fatalf("op %d: left an invalid snapshot: %v", i, err)
			}
		}
		if i > 1000 {
			t.Fatal("Create never succeeds")
		}
	}
}
