//go:build unix

package fsutil

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestRegularAndDir: what each kind of entry gives, without any being
// opened (a FIFO's open would block the test).
func TestRegularAndDir(t *testing.T) {
	d := t.TempDir()
	fs := vfs.Default
	p := func(n string) string { return filepath.Join(d, n) }
	if err := os.WriteFile(p("file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(p("fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(p("nowhere"), p("dangling")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(p("file"), p("link")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		listed bool
		want   string // "" ok, "entry: <text>" an *EntryError, "notexist"
	}{
		{"file", true, ""},
		{"link", true, ""},
		{"fifo", false, "entry: not a regular file (p"},
		{"dir", false, "entry: not a regular file (d"},
		{"dangling", true, "entry: " + Dangling},
		// Looked up by name, not listed: os.Lstat tells it from no entry.
		{"dangling", false, "entry: " + DanglingLink},
		{"missing", false, "notexist"},
		{"file/below", false, "entry: under a path that is not a directory"},
	} {
		_, err := Regular(fs, p(c.name), c.listed)
		var got string
		switch {
		case err == nil:
		case IsEntryError(err):
			got = "entry: " + err.(*EntryError).What
		case os.IsNotExist(err) || strings.Contains(err.Error(), "no such file"):
			got = "notexist"
		default:
			got = err.Error()
		}
		if !strings.HasPrefix(got, c.want) || (c.want == "" && got != "") {
			t.Errorf("Regular(%s, listed=%v) = %q; want %q…", c.name, c.listed, got, c.want)
		}
	}
	if _, err := List(fs, p("fifo")); !IsEntryError(err) || !strings.Contains(err.Error(), "not a directory (p") {
		t.Errorf("List(fifo) = %v", err)
	}
	if _, err := List(fs, p("file")); !IsEntryError(err) || !strings.Contains(err.Error(), "not a directory (a regular file)") {
		t.Errorf("List(file) = %v", err)
	}
	if names, err := List(fs, d); err != nil || len(names) != 5 {
		t.Errorf("List(dir) = %v %v", names, err)
	}
	if _, err := Open(fs, p("fifo"), true); !IsEntryError(err) {
		t.Errorf("Open(fifo) = %v", err)
	}
}

// opaqueFS is the OS filesystem behind a wrapper that does not say so
// (Unwrap returns nil): what a vfs.FS of someone else's may be.
type opaqueFS struct{ vfs.FS }

func (opaqueFS) Unwrap() vfs.FS { return nil }

// TestDanglingLinkByName: a symbolic link to nothing, looked up by name,
// is an *EntryError for Regular and Dir on the OS filesystem and through
// a wrapper of it that passes paths through (errorfs); it was read as
// absent, and what then created the file wrote through the link. An FS
// that does not unwrap to vfs.Default cannot be asked (vfs.FS has no
// Lstat): there it still reads as absent, the documented limit.
func TestDanglingLinkByName(t *testing.T) {
	d := t.TempDir()
	link := filepath.Join(d, "link")
	if err := os.Symlink(filepath.Join(d, "nowhere"), link); err != nil {
		t.Fatal(err)
	}
	wrapped := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(errorfs.Op) error { return nil }))
	for name, fs := range map[string]vfs.FS{"default": vfs.Default, "errorfs": wrapped} {
		if _, err := Regular(fs, link, false); !IsEntryError(err) || !strings.Contains(err.Error(), DanglingLink) {
			t.Errorf("%s: Regular(dangling link) = %v; want an *EntryError", name, err)
		}
		if err := Dir(fs, link); !IsEntryError(err) {
			t.Errorf("%s: Dir(dangling link) = %v; want an *EntryError", name, err)
		}
		if _, err := List(fs, link); !IsEntryError(err) {
			t.Errorf("%s: List(dangling link) = %v; want an *EntryError", name, err)
		}
		if _, err := Regular(fs, filepath.Join(d, "missing"), false); !os.IsNotExist(err) && !strings.Contains(fmt.Sprint(err), "no such file") {
			t.Errorf("%s: Regular(missing) = %v; want not-exist", name, err)
		}
	}
	if _, err := Regular(opaqueFS{vfs.Default}, link, false); IsEntryError(err) || err == nil {
		t.Errorf("opaque FS: Regular(dangling link) = %v; want Stat's not-exist (no Lstat to ask)", err)
	}
	if IsDanglingLink(vfs.NewMem(), link) {
		t.Error("IsDanglingLink asked the OS about a path of a MemFS")
	}
}
