package scratch

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A store lives in a directory of its own under root/tmp, named for its
// purpose and a random tag; Close removes it.
func TestStoreLivesUnderTmpUntilClosed(t *testing.T) {
	fs := vfs.NewMem()
	a, err := Open(fs, "db", "replay", quiet{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(fs, "db", "replay", quiet{})
	if err != nil {
		t.Fatal(err)
	}
	names, _ := fs.List("db/tmp")
	named := regexp.MustCompile(`^replay-[0-9a-f]{16}$`)
	if len(names) != 2 || !named.MatchString(names[0]) || !named.MatchString(names[1]) {
		t.Fatalf("two stores for one purpose in db/tmp: %q", names)
	}
	if err := a.Set([]byte("k"), []byte("v"), pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	if a.Purpose() != "replay" {
		t.Fatalf("purpose %q", a.Purpose())
	}
	a.Close()
	b.Close()
	if names, _ := fs.List("db/tmp"); len(names) != 0 {
		t.Fatalf("closed stores left %q", names)
	}
}

// A read-only open's store is never under the database: on a MemFS it is
// in memory of its own, and the database's filesystem is untouched.
func TestOpenOutsideWritesNothingUnderTheDatabase(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("db", 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := OpenOutside(fs, "verify", quiet{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Set([]byte("k"), []byte("v"), pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	if root, _ := fs.List(""); len(root) != 1 || root[0] != "db" {
		t.Fatalf("the filesystem's root holds %q after a store opened outside the database", root)
	}
	if names, _ := fs.List("db"); len(names) != 0 {
		t.Fatalf("the database directory holds %q after a store opened outside it", names)
	}
	s.Close()
}

// MkdirTemp makes a directory of its own under root/tmp; RemoveAll removes
// tmp whole, and is no error when there is none.
func TestMkdirTempAndRemoveAll(t *testing.T) {
	fs := vfs.NewMem()
	if err := RemoveAll(fs, "db"); err != nil {
		t.Fatalf("RemoveAll without a tmp directory: %v", err)
	}
	dir, err := MkdirTemp(fs, "db", "rebuild")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^db/tmp/rebuild-[0-9a-f]{16}$`).MatchString(dir) {
		t.Fatalf("MkdirTemp made %q", dir)
	}
	if _, err := fs.Stat(dir); err != nil {
		t.Fatal(err)
	}
	if err := RemoveAll(fs, "db"); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat("db/tmp"); err == nil {
		t.Fatal("db/tmp is still there after RemoveAll")
	}
}

// A HashSet answers the same in memory and past its bound, where it goes
// on in a scratch store that Close removes.
func TestHashSetSpills(t *testing.T) {
	fs := vfs.NewMem()
	s := NewHashSet(memOpener(fs, "db"), "ingest-idem", "idempotency key store", 4)
	hash := func(i int) (h [32]byte) {
		copy(h[:], fmt.Sprintf("hash %d", i))
		return h
	}
	for i := range 10 {
		if has, err := s.Has(hash(i)); err != nil || has {
			t.Fatalf("hash %d before it was added: %v, %v", i, has, err)
		}
		if err := s.Add(hash(i)); err != nil {
			t.Fatal(err)
		}
		for j := range i + 1 {
			if has, err := s.Has(hash(j)); err != nil || !has {
				t.Fatalf("hash %d after %d added: %v, %v", j, i+1, has, err)
			}
		}
	}
	if len(s.mem) != 4 || s.store == nil {
		t.Fatalf("%d hashes in memory, store %v: want 4 and a store", len(s.mem), s.store != nil)
	}
	s.Close()
	if names, _ := fs.List("db/tmp"); len(names) != 0 {
		t.Fatalf("Close left %q", names)
	}
}
