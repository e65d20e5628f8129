package engine

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestDiscardRemovesOnlyAnUnusedNewDatabase: Discard removes a database
// this Open created and nothing was appended to, with the directories Open
// made on the way; it keeps (and closes) every other one: one that
// existed, one that took a record, one whose directory holds a file it did
// not make. A pre-existing empty directory is left as it was.
func TestDiscardRemovesOnlyAnUnusedNewDatabase(t *testing.T) {
	ctx := context.Background()
	ls := func(dir string) []string {
		ents, err := os.ReadDir(dir)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}

	t.Run("new and unused", func(t *testing.T) {
		top := filepath.Join(t.TempDir(), "made")
		dir := filepath.Join(top, "a", "db")
		db, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		// A refused append writes nothing.
		if _, err := db.Append(ctx, Entry{Anchor: "", Type: "put", Key: []byte("k")}); err == nil {
			t.Fatal("an empty anchor id was accepted")
		}
		removed, err := db.Discard()
		if err != nil || !removed {
			t.Fatalf("Discard: removed %v, %v", removed, err)
		}
		if _, err := os.Stat(top); !os.IsNotExist(err) {
			t.Fatalf("%s is still there (%v): %v", top, err, ls(dir))
		}
		if _, err := db.Discard(); err == nil {
			t.Fatal("a second Discard did not fail")
		}
	})

	t.Run("existing empty directory", func(t *testing.T) {
		dir := t.TempDir()
		db, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if removed, err := db.Discard(); err != nil || !removed {
			t.Fatalf("Discard: removed %v, %v", removed, err)
		}
		if got := ls(dir); len(got) != 0 {
			t.Fatalf("left in the directory: %v", got)
		}
	})

	t.Run("new with a record", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "db")
		db, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
			t.Fatal(err)
		}
		if removed, err := db.Discard(); err != nil || removed {
			t.Fatalf("Discard of a database with a record: removed %v, %v", removed, err)
		}
		db, err = Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if v, err := db.Get(ctx, []byte("k")); err != nil || string(v.Value) != "v" {
			t.Fatalf("after Discard kept it: %v %v", v, err)
		}
	})

	t.Run("existing database", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "db")
		db, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		before := ls(dir)
		db, err = Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if removed, err := db.Discard(); err != nil || removed {
			t.Fatalf("Discard of an existing database: removed %v, %v", removed, err)
		}
		if got := ls(dir); len(got) != len(before) {
			t.Fatalf("before %v, after %v", before, got)
		}
	})

	t.Run("foreign file", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "db")
		db, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
		if removed, err := db.Discard(); err != nil || removed {
			t.Fatalf("Discard with a foreign file: removed %v, %v", removed, err)
		}
		if _, err := os.Stat(filepath.Join(dir, IDFile)); err != nil {
			t.Fatalf("the kept database lost its id: %v", err)
		}
	})
}
