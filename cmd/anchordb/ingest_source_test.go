package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestIngestSegmentNotARegularFile: a source whose segment file is a FIFO,
// a device, a directory or a dangling link is malformed input (INPUT_001), refused before
// anything is opened. Opening a FIFO would block with no context (SIGINT
// caught, both databases locked: the ingest hangs), and a directory is not
// an I/O failure of the system (IO_001).
func TestIngestSegmentNotARegularFile(t *testing.T) {
	tmp := t.TempDir()
	src := filepath.Join(tmp, "src")
	mustRun(t, "--dir", src, "put", "a", "k", "v")
	mustRun(t, "--dir", src, "put", "b", "k", "v")
	adir := segment.AnchorDir(vfs.Default, src, "a")
	bdir := segment.AnchorDir(vfs.Default, src, "b")

	type plant struct {
		name string
		make func(path string) error
	}
	plants := []plant{
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o600) }},
		{"directory", func(p string) error { return os.Mkdir(p, 0o755) }},
		{"dangling link", func(p string) error { return os.Symlink(filepath.Join(tmp, "nowhere"), p) }},
	}
	if _, err := os.Stat("/dev/zero"); err == nil {
		plants = append(plants, plant{"device", func(p string) error { return os.Symlink("/dev/zero", p) }})
	}
	for _, pl := range plants {
		for _, at := range []struct {
			name, dir string
			segno     uint64
		}{
			{"after a segment", adir, 2},
			{"the first segment", bdir, 1},
		} {
			t.Run(pl.name+"/"+at.name, func(t *testing.T) {
				path := filepath.Join(at.dir, segment.FileName(at.segno))
				var saved []byte
				if at.segno == 1 {
					b, err := os.ReadFile(path)
					if err != nil {
						t.Fatal(err)
					}
					saved = b
					if err := os.Remove(path); err != nil {
						t.Fatal(err)
					}
				}
				if err := pl.make(path); err != nil {
					t.Skipf("%s: %v", pl.name, err)
				}
				defer func() {
					if err := os.RemoveAll(path); err != nil {
						t.Fatal(err)
					}
					if saved != nil {
						if err := os.WriteFile(path, saved, 0o644); err != nil {
							t.Fatal(err)
						}
					}
				}()
				dst := filepath.Join(t.TempDir(), "dst")
				r := runWithin(t, 20*time.Second, "--dir", dst, "--json", "ingest", "--from", src)
				wantExit(t, r, 2)
				errObj(t, r, "INPUT_001")
			})
		}
	}
	// The source, as it was, ingests.
	mustRun(t, "--dir", filepath.Join(tmp, "dst"), "ingest", "--from", src)
}

// TestIngestForeignFilesInSource: a file where the source's anchors tree
// has a directory (a fan or an anchor directory, or an --anchor's own) is a
// malformed source, INPUT_001 (exit 2), not an I/O failure of this database
// (it was IO_001 "write_failed"). Names that are no anchor directory's are
// ignored, as the engine ignores them in its own directory.
func TestIngestForeignFilesInSource(t *testing.T) {
	tmp := t.TempDir()
	src := filepath.Join(tmp, "src")
	mustRun(t, "--dir", src, "put", "a", "k", "v")
	adir := segment.AnchorDir(vfs.Default, src, "a")
	fan := filepath.Dir(adir)
	write := func(p string) func() {
		t.Helper()
		if err := os.WriteFile(p, []byte("junk"), 0o644); err != nil {
			t.Fatal(err)
		}
		return func() { os.Remove(p) }
	}
	// Ignored: names no anchor directory has.
	for _, p := range []string{filepath.Join(src, "anchors", "README"), filepath.Join(fan, "notes.txt"), filepath.Join(adir, "x.tmp")} {
		defer write(p)()
	}
	mustRun(t, "--dir", filepath.Join(tmp, "ok"), "ingest", "--from", src)

	for _, c := range []struct {
		name   string
		path   string
		anchor string
	}{
		{"a file as a fan directory", filepath.Join(src, "anchors", "00"), ""},
		{"a file as an anchor directory", filepath.Join(fan, "0123456789abcdef0123456789abcd"), ""},
		{"a file as the named anchor's directory", segment.AnchorDir(vfs.Default, src, "b"), "b"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := os.MkdirAll(filepath.Dir(c.path), 0o755); err != nil {
				t.Fatal(err)
			}
			defer write(c.path)()
			args := []string{"--dir", filepath.Join(t.TempDir(), "dst"), "--json", "ingest", "--from", src}
			if c.anchor != "" {
				args = append(args, "--anchor", c.anchor)
			}
			r := runCLI(t, args...)
			wantExit(t, r, 2)
			errObj(t, r, "INPUT_001")
		})
	}
}
