package testutil

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/errors/oserror"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// ReadFile returns the whole content of path in fs.
func ReadFile(fs vfs.FS, path string) ([]byte, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, st.Size())
	if _, err := f.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf, nil
}

// WriteFile replaces path with data, durably: the file and its directory
// are synced, so a crash clone taken afterwards keeps it. Missing parent
// directories are created. It panics on failure (it serves fault-injecting
// filesystems as well as tests, and a fixture that cannot be written is a
// broken test).
func WriteFile(fs vfs.FS, path string, data []byte) {
	if err := writeFile(fs, path, data); err != nil {
		panic(fmt.Sprintf("write %s: %v", path, err))
	}
}

func writeFile(fs vfs.FS, path string, data []byte) error {
	if err := mkdirAllDurable(fs, fs.PathDir(path)); err != nil {
		return err
	}
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	// NB: MemFS's Write may keep or modify the buffer it is given.
	if _, err := f.Write(slices.Clone(data)); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if d, err := fs.OpenDir(fs.PathDir(path)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// mkdirAllDurable creates dir and its missing parents, and syncs each
// directory whose entries changed: the new ones and the existing parent of
// the topmost new one.
func mkdirAllDurable(fs vfs.FS, dir string) error {
	var missing []string
	for d := dir; ; d = fs.PathDir(d) {
		if _, err := fs.Stat(d); err == nil {
			break
		}
		missing = append(missing, d)
		if fs.PathDir(d) == d {
			break
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, d := range append(missing, fs.PathDir(missing[len(missing)-1])) {
		if err := syncDir(fs, d); err != nil {
			return err
		}
	}
	return nil
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}

// Tree lists every file and directory under root with its size; a
// directory's key ends in "/" and its size is -1.
func Tree(t testing.TB, fs vfs.FS, root string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	var walk func(dir string)
	walk = func(dir string) {
		names, err := fs.List(dir)
		if err != nil {
			t.Fatalf("list %s: %v", dir, err)
		}
		for _, n := range names {
			p := fs.PathJoin(dir, n)
			st, err := fs.Stat(p)
			if err != nil {
				t.Fatalf("stat %s: %v", p, err)
			}
			if st.IsDir() {
				out[p+"/"] = -1
				walk(p)
			} else {
				out[p] = st.Size()
			}
		}
	}
	walk(root)
	return out
}

// DiffTrees describes how tree b differs from tree a (both from Tree), one
// path a line, sorted: "-p" gone, "+p" new, "~p a→b" resized. It is empty
// when the trees are the same.
func DiffTrees(a, b map[string]int64) string {
	var d []string
	for p, s := range a {
		if t, ok := b[p]; !ok {
			d = append(d, "-"+p)
		} else if s != t {
			d = append(d, fmt.Sprintf("~%s %d→%d", p, s, t))
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			d = append(d, "+"+p)
		}
	}
	sort.Strings(d)
	return strings.Join(d, "\n")
}

// CopyTree copies the subtree src of from into dst of to, directories
// (empty ones too) and files, durably (as WriteFile). The source may be the index of an open database, whose
// flushes and compactions remove tables while the copy lists and reads
// them: a copy that met a file gone between the listing and the read is not
// a copy of any one moment, so it is taken again, up to 100 times.
func CopyTree(from vfs.FS, src string, to vfs.FS, dst string) error {
	for attempt := 0; attempt < 100; attempt++ {
		files := map[string][]byte{}
		var dirs []string
		vanished, err := collectTree(from, src, "", files, &dirs)
		if err != nil {
			return err
		}
		if vanished {
			continue
		}
		if err := mkdirAllDurable(to, dst); err != nil {
			return err
		}
		for _, rel := range dirs {
			if err := mkdirAllDurable(to, to.PathJoin(dst, rel)); err != nil {
				return err
			}
		}
		for rel, data := range files {
			if err := writeFile(to, to.PathJoin(dst, rel), data); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("copy %s: it kept changing under 100 copies", src)
}

// collectTree reads every file under src into files, keyed by its path
// below src, and appends every directory's path below src to dirs; vanished
// reports a file listed but gone when read.
func collectTree(from vfs.FS, src, rel string, files map[string][]byte, dirs *[]string) (vanished bool, err error) {
	dir := from.PathJoin(src, rel)
	names, err := from.List(dir)
	if err != nil {
		return false, err
	}
	for _, n := range names {
		r := from.PathJoin(rel, n)
		st, err := from.Stat(from.PathJoin(src, r))
		if errors.Is(err, oserror.ErrNotExist) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		if st.IsDir() {
			*dirs = append(*dirs, r)
			if v, err := collectTree(from, src, r, files, dirs); v || err != nil {
				return v, err
			}
			continue
		}
		data, err := ReadFile(from, from.PathJoin(src, r))
		if errors.Is(err, oserror.ErrNotExist) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		files[r] = data
	}
	return false, nil
}

// SegmentFiles returns the paths of the anchor's segment files in the
// database directory dir, oldest first.
func SegmentFiles(t testing.TB, fs vfs.FS, dir, anchor string) []string {
	t.Helper()
	adir := segment.AnchorDir(fs, dir, anchor)
	names, err := fs.List(adir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if _, ok := segment.ParseFileName(n); ok {
			out = append(out, fs.PathJoin(adir, n))
		}
	}
	sort.Strings(out)
	return out
}
