package engine

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestIndexCorruptMarkerTmpRemoved: a power loss while the marker is written
// (its .tmp synced, not yet renamed) leaves INDEX-CORRUPT.tmp in the
// database root; the next Open removes it (removeLeftovers).
func TestIndexCorruptMarkerTmpRemoved(t *testing.T) {
	mem, _, _ := closedWithManifest(t)
	var clone *vfs.MemFS
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpRename && strings.HasSuffix(op.Path, IndexCorruptMarker+".tmp") && clone == nil {
			clone = testutil.CrashClone(mem, vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, 2))})
		}
		return nil
	})
	fs := errorfs.Wrap(testutil.LockOrdered(mem), inj)
	db := mustOpen(t, fs, crashOptions(fs, false))
	raiseCorruption(db)
	_ = db.Close()
	if clone == nil {
		t.Fatal("no crash point")
	}
	if _, err := clone.Stat("db/" + IndexCorruptMarker + ".tmp"); err != nil {
		t.Fatalf("scenario: no tmp at the crash point: %v", err)
	}
	for i := 0; i < 2; i++ {
		db := mustOpen(t, clone, crashOptions(clone, false))
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := clone.Stat("db/" + IndexCorruptMarker + ".tmp"); err == nil {
		t.Fatalf("%s.tmp outlives two Opens", IndexCorruptMarker)
	}
}
