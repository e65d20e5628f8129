package scratch

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// quiet is a pebble.Logger that logs nothing and panics on Fatalf.
type quiet struct{}

func (quiet) Infof(string, ...any)              {}
func (quiet) Errorf(string, ...any)             {}
func (quiet) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

var _ pebble.Logger = quiet{}

// memOpener opens scratch stores under root on fs.
func memOpener(fs vfs.FS, root string) Opener {
	return func(purpose string) (*Store, error) {
		return Open(fs, root, purpose, quiet{})
	}
}

// In memory or spilled part way (at every threshold), the rows come back in
// (group, seq) order, two rows of one seq both kept, and closing removes
// the scratch store.
func TestRowSpillOrder(t *testing.T) {
	type row struct {
		group string
		seq   uint64
		k, v  string
	}
	in := []row{
		{"b", 7, "k-b7", "v1"}, {"a", 300, "k-a300", "v2"}, {"ab", 1, "k-ab1", "v3"},
		{"a", 2, "k-a2", "v4"}, {"b", 7, "k-b7-other", "v5"}, {"a", 1 << 40, "k-big", "v6"}, {"a", 9, "k-a9", "v7"},
	}
	want := []string{"a/2/k-a2", "a/9/k-a9", "a/300/k-a300", "a/1099511627776/k-big", "ab/1/k-ab1", "b/7/k-b7", "b/7/k-b7-other"}
	for _, limit := range []int{1 << 20, 0, 200, 400} {
		fs := vfs.NewMem()
		s := NewRowSpill(memOpener(fs, "db"), "spill-test", limit)
		for _, r := range in {
			if err := s.Add([]byte(r.group), r.seq, []byte(r.k), []byte(r.v)); err != nil {
				t.Fatal(err)
			}
		}
		spilled := s.store != nil
		var got []string
		if err := s.Each(func(r Row) bool {
			ve := ""
			for _, x := range in {
				if x.k == string(r.Key) {
					ve = fmt.Sprintf("%s/%d/%s", x.group, x.seq, x.k)
					if x.group != r.Group || x.v != string(r.Value) {
						t.Errorf("limit %d: row %s came back as %q = %q", limit, ve, r.Group, r.Value)
					}
				}
			}
			got = append(got, ve)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("limit %d (spilled %v): rows in order %q, want %q", limit, spilled, got, want)
		}
		if spilled != (limit < 1<<20) {
			t.Errorf("limit %d: spilled %v", limit, spilled)
		}
		s.Close()
		if names, _ := fs.List("db/tmp"); len(names) != 0 {
			t.Errorf("limit %d: the scratch store was left behind: %v", limit, names)
		}
	}
}

// Each stops when fn returns false, in memory and spilled.
func TestRowSpillEachStops(t *testing.T) {
	for _, limit := range []int{1 << 20, 0} {
		s := NewRowSpill(memOpener(vfs.NewMem(), "db"), "spill-test", limit)
		for seq := range uint64(5) {
			if err := s.Add([]byte("a"), seq, []byte(fmt.Sprint("k", seq)), nil); err != nil {
				t.Fatal(err)
			}
		}
		n := 0
		if err := s.Each(func(Row) bool { n++; return n < 2 }); err != nil {
			t.Fatal(err)
		}
		if n != 2 {
			t.Errorf("limit %d: fn called %d times after it returned false at 2", limit, n)
		}
		s.Close()
	}
}
