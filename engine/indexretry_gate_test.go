package engine

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestIndexRetryGateHoldsAfterServeError: when serve() hands Open a held
// corruption, the gate keeps holding: a corruption Pebble reports while that
// failing first try still closes the index (a compaction Close waits for)
// is not taken for one on a running database, so it writes no marker and
// logs no stopped writes during an Open that then succeeds. The reports are
// raised here from the filesystem at the two moments (before serve: the new
// journal's creation; after: the error path's journal close, just before
// closeIndex).
func TestIndexRetryGateHoldsAfterServeError(t *testing.T) {
	mem, _, _ := closedWithManifest(t)
	var handler atomic.Pointer[func(pebble.DataCorruptionInfo)]
	var phase, markerWrites atomic.Int64
	info := pebble.DataCorruptionInfo{Path: "db/index/000012.sst", Details: errors.New("block checksum mismatch")}
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch {
		case op.Kind == errorfs.OpCreate && strings.Contains(op.Path, IndexCorruptMarker):
			markerWrites.Add(1)
		case op.Kind == errorfs.OpCreate && strings.HasPrefix(op.Path, "db/journal/") && phase.CompareAndSwap(0, 1):
			(*handler.Load())(info) // during Open: held by the gate
		}
		return nil
	})
	fs := &closeHookFS{FS: errorfs.Wrap(testutil.LockOrdered(mem), inj), onClose: func(name string) {
		if strings.HasPrefix(name, "db/journal/") && phase.CompareAndSwap(1, 2) {
			(*handler.Load())(info) // the first try failing, index not yet closed
		}
	}}
	log := &recordingLogger{}
	opts := crashOptions(fs, false)
	opts.Logger = log
	opts.PebbleOptions = func(po *pebble.Options) {
		h := po.EventListener.DataCorruption
		handler.Store(&h)
	}
	db := mustOpen(t, fs, opts)
	defer db.Close()
	if phase.Load() != 2 {
		t.Fatalf("scenario did not happen: phase %d", phase.Load())
	}
	if !db.RecoveryReport().Rebuilt {
		t.Fatalf("no rebuild")
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, e := range log.errors {
		if strings.Contains(e, "stopped accepting writes") {
			t.Errorf("an Open that succeeded logged: %s", e)
		}
	}
	if n := markerWrites.Load(); n != 0 {
		t.Errorf("the INDEX-CORRUPT marker was written %d times during an Open", n)
	}
}

type closeHookFS struct {
	vfs.FS
	onClose func(name string)
}

type closeHookFile struct {
	vfs.File
	name string
	fs   *closeHookFS
}

func (f closeHookFile) Close() error {
	f.fs.onClose(f.name)
	return f.File.Close()
}

func (c *closeHookFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := c.FS.Create(name, cat)
	if err != nil {
		return f, err
	}
	return closeHookFile{f, name, c}, nil
}
