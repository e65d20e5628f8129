package engine

import (
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestDBIDReadErrorIsIO: a failed read of the database id file was
// ignored, the id taken as empty and the file reported as malformed
// (INPUT_001): an operator told to fix a file that is fine. It is IO_001,
// naming the file, and the id is unchanged once the read succeeds.
func TestDBIDReadErrorIsIO(t *testing.T) {
	mem := vfs.NewMem()
	db := mustOpen(t, mem, Options{})
	id := db.ID()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	fired := false
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileReadAt && op.Path == "db/"+IDFile {
			fired = true
			return errorfs.ErrInjected
		}
		return nil
	})
	_, err := Open("db", Options{FS: errorfs.Wrap(mem, inj)})
	if !fired {
		t.Fatal("the id file was not read: the test injects nothing")
	}
	if errs.CodeOf(err) != errs.CodeWriteFailed {
		t.Fatalf("open with the id file's read failing: %v; want IO_001", err)
	}
	db = mustOpen(t, mem, Options{})
	defer db.Close()
	if db.ID() != id {
		t.Fatalf("id %s after the failed open; want %s", db.ID(), id)
	}
}
