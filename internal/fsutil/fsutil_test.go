package fsutil

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestOpenOfAListedFileRemovedAfterItsStat: a reader lists a directory,
// Open's Stat finds the file, and a writer removes it before the open (a
// truncation removing a segment that a lockless reader listed). The open
// is Dangling, as when the removal comes before the Stat, so the reader
// takes its stub; unlisted, the not-exist error is returned as it is.
func TestOpenOfAListedFileRemovedAfterItsStat(t *testing.T) {
	mem := vfs.NewMem()
	for _, listed := range []bool{true, false} {
		f, err := mem.Create("seg", vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
			if op.Kind == errorfs.OpOpen && op.Path == "seg" {
				if err := mem.Remove("seg"); err != nil {
					t.Error(err)
				}
			}
			return nil
		}))
		_, err = Open(fs, "seg", listed)
		var ee *EntryError
		if got := errors.As(err, &ee) && ee.What == Dangling; got != listed {
			t.Errorf("listed=%v: %v (Dangling: %v)", listed, err, got)
		}
		if !listed && !isNotExist(err) {
			t.Errorf("unlisted: %v, want not-exist", err)
		}
	}
}
