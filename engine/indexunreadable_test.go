package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// closedWithManifest returns a cleanly closed database and the path of the
// MANIFEST its index's marker names.
func closedWithManifest(t *testing.T) (*vfs.MemFS, []ackedEntry, string) {
	t.Helper()
	mem := vfs.NewCrashableMem()
	db := mustOpen(t, mem, crashOptions(mem, false))
	acks := &ackLog{}
	if err := workload(context.Background(), db, 2, 20, acks); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return mem, acks.snapshot(), manifestOf(t, mem)
}

// manifestOf returns the path of the MANIFEST the marker of the closed
// database's index in mem names.
func manifestOf(t *testing.T, mem *vfs.MemFS) string {
	t.Helper()
	names, err := mem.List("db/index")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if m, ok := strings.CutPrefix(n, "marker.manifest."); ok {
			_, file, _ := strings.Cut(m, ".")
			return mem.PathJoin("db/index", file)
		}
	}
	t.Fatalf("no manifest marker among %q", names)
	return ""
}

// TestUnreadableIndexIsRebuilt: an index that Pebble cannot open because
// of its own bytes (its MANIFEST missing or corrupt) is as good as lost: Open
// moves it into lost+found, says so, and rebuilds it from the segments,
// losing nothing acknowledged.
func TestUnreadableIndexIsRebuilt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(mem *vfs.MemFS, manifest string)
	}{
		{"manifest missing", func(mem *vfs.MemFS, manifest string) {
			if err := mem.Remove(manifest); err != nil {
				t.Fatal(err)
			}
		}},
		{"manifest corrupt", func(mem *vfs.MemFS, manifest string) {
			data, err := testutil.ReadFile(mem, manifest)
			if err != nil {
				t.Fatal(err)
			}
			for i := range data {
				data[i] ^= 0x5A
			}
			testutil.WriteFile(mem, manifest, data)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem, acked, manifest := closedWithManifest(t)
			tc.spoil(mem, manifest)
			db, err := Open("db", crashOptions(mem, false))
			if err != nil {
				t.Fatalf("open with an unreadable index: %v", err)
			}
			rep := db.RecoveryReport()
			var ev *RecoveryEvent
			for i := range rep.Events {
				if rep.Events[i].Kind == EventIndexUnreadable {
					ev = &rep.Events[i]
				}
			}
			if ev == nil || !rep.Rebuilt || CodeOf(ev.Err) != errs.CodeIndexMismatch || !strings.HasPrefix(ev.File, "db/"+LostAndFound+"/index-") {
				t.Fatalf("want an index_unreadable event (INT_004, kept in lost+found) and a rebuild, got %+v", rep)
			}
			if _, err := mem.Stat(ev.File); err != nil {
				t.Errorf("the unreadable index was not kept: %v", err)
			}
			checkDB(t, db, acked)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db = mustOpen(t, mem, crashOptions(mem, false))
			defer db.Close()
			if rep := db.RecoveryReport(); !rep.Clean || len(rep.Events) != 0 {
				t.Errorf("the open after the rebuild: %+v", rep)
			}
			checkDB(t, db, acked)
		})
	}
}

// TestIndexIOErrorIsNotUnreadable: an I/O error while Pebble opens the
// index stops Open with IO_001 and moves nothing: a rebuild is for an index
// whose bytes are wrong, not for a disk that failed a read.
func TestIndexIOErrorIsNotUnreadable(t *testing.T) {
	mem, _, manifest := closedWithManifest(t)
	failed := errors.New("injected EIO")
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Path == manifest && op.Kind.ReadOrWrite() == errorfs.OpIsRead {
			return failed
		}
		return nil
	})
	_, err := Open("db", crashOptions(errorfs.Wrap(testutil.LockOrdered(mem), inj), false))
	if err == nil || CodeOf(err) != errs.CodeWriteFailed || !errors.Is(err, failed) {
		t.Fatalf("open with a failing index read: want IO_001 wrapping the failure, got %v", err)
	}
	if _, err := mem.Stat(manifest); err != nil {
		t.Fatalf("the index was moved after an I/O error: %v", err)
	}
	if names, _ := mem.List("db/" + LostAndFound); len(names) != 0 {
		t.Fatalf("lost+found after an I/O error: %q", names)
	}
	db := mustOpen(t, mem, crashOptions(mem, false))
	defer db.Close()
	if rep := db.RecoveryReport(); rep.Rebuilt {
		t.Errorf("the index was rebuilt after an I/O error: %+v", rep)
	}
}

// spoilTables flips bytes in the first half of every sstable of the index,
// past the first 100: data blocks that fail their checksums.
func spoilTables(t *testing.T, mem *vfs.MemFS) {
	t.Helper()
	names, err := mem.List("db/index")
	if err != nil {
		t.Fatal(err)
	}
	spoiled := 0
	for _, n := range names {
		if !strings.HasSuffix(n, ".sst") {
			continue
		}
		p := mem.PathJoin("db/index", n)
		data, err := testutil.ReadFile(mem, p)
		if err != nil {
			t.Fatal(err)
		}
		for i := 100; i < len(data)/2; i += 7 {
			data[i] ^= 0xFF
		}
		testutil.WriteFile(mem, p, data)
		spoiled++
	}
	if spoiled == 0 {
		t.Fatal("the index has no sstable to spoil")
	}
}

// TestCorruptIndexBlock: a block of the index that fails its checksum
// never takes the process down (Pebble's default reaction is Fatalf; "at
// open" panicked before). Met while Open reads the index, the index is moved
// aside and rebuilt; met by a running database, writes stop with an error
// naming the cure, and rebuild-index cures it.
func TestCorruptIndexBlock(t *testing.T) {
	t.Run("at open", func(t *testing.T) {
		mem, acked, _ := closedWithManifest(t)
		spoilTables(t, mem)
		db, err := Open("db", crashOptions(mem, false))
		if err != nil {
			t.Fatalf("open with a corrupt index block: %v", err)
		}
		defer db.Close()
		rep := db.RecoveryReport()
		found := false
		for _, ev := range rep.Events {
			found = found || (ev.Kind == EventIndexUnreadable && CodeOf(ev.Err) == errs.CodeIndexMismatch)
		}
		if !found || !rep.Rebuilt {
			t.Fatalf("want an index_unreadable event and a rebuild, got %+v", rep)
		}
		checkDB(t, db, acked)
	})
	t.Run("while open", func(t *testing.T) {
		// Which reads of a running database reach a spoiled block depends
		// on its cache and its compactions, so the event Pebble raises
		// for one is raised here directly: it must not end the process
		// (Pebble's default calls Fatalf); writes stop with an error that
		// says the next Open rebuilds the index, and it does: a reopen
		// cures it even when Open itself would read no spoiled block.
		mem, acked, _ := closedWithManifest(t)
		db := mustOpen(t, mem, crashOptions(mem, false))
		raiseCorruption(db)
		ctx := context.Background()
		_, err := db.Put(ctx, "after", []byte("k"), []byte("v"))
		if !errors.Is(err, ErrWriteFailed) || !strings.Contains(err.Error(), "INT_004") || !strings.Contains(err.Error(), "the next Open rebuilds it") {
			t.Fatalf("a write after index corruption: want IO_001 naming INT_004 and the cure, got %v", err)
		}
		if _, err := mem.Stat("db/" + IndexCorruptMarker); err != nil {
			t.Fatalf("no corruption marker: %v", err)
		}
		checkDB(t, db, acked) // reads go on
		_ = db.Close()
		for round := 0; round < 2; round++ {
			db = mustOpen(t, mem, crashOptions(mem, false))
			rebuilt := false
			for _, ev := range db.RecoveryReport().Events {
				rebuilt = rebuilt || ev.Kind == EventIndexUnreadable
			}
			if rebuilt != (round == 0) || db.RecoveryReport().Rebuilt != (round == 0) {
				t.Fatalf("open %d after the corruption: index_unreadable %v, report %+v", round, rebuilt, db.RecoveryReport())
			}
			checkDB(t, db, acked)
			if _, err := db.Put(ctx, "after", []byte("k"), []byte("v")); err != nil {
				t.Fatalf("open %d: a write after the rebuild: %v", round, err)
			}
			if _, err := mem.Stat("db/" + IndexCorruptMarker); !oserrorIsNotExist(err) {
				t.Fatalf("open %d: the marker outlived the rebuild: %v", round, err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("crash after the move", func(t *testing.T) {
		// A crash between moving the marked index aside and the new index
		// leaves the marker and no index: the next Open rebuilds.
		mem, acked, _ := closedWithManifest(t)
		db := mustOpen(t, mem, crashOptions(mem, false))
		raiseCorruption(db)
		_ = db.Close()
		if err := mem.MkdirAll("db/"+LostAndFound, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := mem.Rename("db/index", "db/"+LostAndFound+"/index-1"); err != nil {
			t.Fatal(err)
		}
		db = mustOpen(t, mem, crashOptions(mem, false))
		defer db.Close()
		if !db.RecoveryReport().Rebuilt {
			t.Fatalf("no rebuild: %+v", db.RecoveryReport())
		}
		checkDB(t, db, acked)
		if _, err := mem.Stat("db/" + IndexCorruptMarker); !oserrorIsNotExist(err) {
			t.Fatalf("the marker outlived the rebuild: %v", err)
		}
	})
	t.Run("rebuild-index", func(t *testing.T) {
		// rebuild-index does what the marker asks for, and clears it.
		mem, acked, _ := closedWithManifest(t)
		db := mustOpen(t, mem, crashOptions(mem, false))
		raiseCorruption(db)
		_ = db.Close()
		ctx := context.Background()
		if _, err := RebuildIndex(ctx, "db", crashOptions(mem, false), true); err != nil {
			t.Fatalf("rebuild-index after index corruption: %v", err)
		}
		db = mustOpen(t, mem, crashOptions(mem, false))
		defer db.Close()
		for _, ev := range db.RecoveryReport().Events {
			if ev.Kind == EventIndexUnreadable {
				t.Fatalf("the marker outlived rebuild-index: %v", ev)
			}
		}
		checkDB(t, db, acked)
		if _, err := db.Put(ctx, "after", []byte("k"), []byte("v")); err != nil {
			t.Fatalf("a write after the rebuild: %v", err)
		}
	})
	t.Run("marker not written", func(t *testing.T) {
		// When the marker cannot be written, the error names rebuild-index.
		mem, _, _ := closedWithManifest(t)
		inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
			if op.Kind == errorfs.OpCreate && strings.Contains(op.Path, IndexCorruptMarker) {
				return errors.New("injected create failure")
			}
			return nil
		})
		fs := errorfs.Wrap(testutil.LockOrdered(mem), inj)
		db := mustOpen(t, fs, crashOptions(fs, false))
		defer db.Close()
		raiseCorruption(db)
		_, err := db.Put(context.Background(), "after", []byte("k"), []byte("v"))
		if !errors.Is(err, ErrWriteFailed) || !strings.Contains(err.Error(), "anchordb rebuild-index") {
			t.Fatalf("a write after index corruption with no marker: want IO_001 naming rebuild-index, got %v", err)
		}
	})
}

// raiseCorruption raises the event Pebble raises for a block that fails its
// checksum on a running database.
func raiseCorruption(db *DB) {
	db.pebbleOpts.EventListener.DataCorruption(pebble.DataCorruptionInfo{Path: "db/index/000012.sst", Details: errors.New("block checksum mismatch")})
}
