package engine

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestIndexCorruptMarkerOutlivesAFailedRebuild: the second try removes the
// INDEX-CORRUPT marker before serve() hands it a corruption reported while
// it ran; Open then fails (INT_004) with the marker gone, and the next Open
// trusts the index the failed try left instead of rebuilding it.
func TestIndexCorruptMarkerOutlivesAFailedRebuild(t *testing.T) {
	mem, _, _ := closedWithManifest(t)
	db := mustOpen(t, mem, crashOptions(mem, false))
	raiseCorruption(db)
	_ = db.Close()
	var handler atomic.Pointer[func(pebble.DataCorruptionInfo)]
	var creates atomic.Int64
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpCreate && strings.HasPrefix(op.Path, "db/journal/") && creates.Add(1) == 1 {
			// The first try never creates a journal file (the marker moves
			// the index aside before any recovery): this is the second's.
			(*handler.Load())(pebble.DataCorruptionInfo{Path: "db/index/000009.sst", Details: errors.New("block checksum mismatch")})
		}
		return nil
	})
	fs := errorfs.Wrap(mem, inj)
	o := crashOptions(fs, false)
	o.PebbleOptions = func(po *pebble.Options) {
		h := po.EventListener.DataCorruption
		handler.Store(&h)
	}
	_, err := Open("db", o)
	if err == nil {
		t.Fatal("scenario: the second try did not fail")
	}
	if _, serr := mem.Stat("db/" + IndexCorruptMarker); serr != nil {
		t.Fatalf("Open failed (%v) on a corruption of the rebuilt index, and the marker that would make the next Open rebuild it is gone: %v", err, serr)
	}
}
