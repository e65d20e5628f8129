//go:build unix

package fsutil

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
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
		{"dangling", false, "notexist"},
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
