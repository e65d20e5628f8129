package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A stub written before stop 18 kept only the versions that were their
// key's newest overall, not each key's last in its segment. Here B's delete
// of K, superseded by a later put on A, went with B's first segment. A
// rebuild from a snapshot taken before that put indexes, below its frontier,
// no row for K (Get is right), and the history check, which takes A's older
// put for the state there, reports INT_004. That is the chosen trade-off
// (DESIGN §9): old stubs cannot be told from new ones, and excusing such a
// missing row would let a deleted state row go unreported on every database
// with stubs inside the frontier. The cure is a full rebuild, which indexes
// every version and leaves no mhistory_from: the same database then
// verifies.
func TestVerifyHistoryFromPreStop18StubNeedsAFullRebuild(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	opts := fixtureOptions(fs)
	db, err := Open("db", opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "A", []byte("K"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Delete(ctx, "B", []byte("K")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 80; i++ {
		if _, err := db.Put(ctx, "B", []byte(fmt.Sprintf("f%03d", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.CreateSnapshot(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "A", []byte("K"), []byte("y")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.truncateSegment(ctx, "B", 1); err != nil {
		t.Fatal(err)
	}
	a, err := db.getAnchor("B", false)
	if err != nil {
		t.Fatal(err)
	}
	stubPath := fs.PathJoin(a.dir, segment.StubFileName(1))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The stub as code before stop 18 wrote it: without K's delete.
	data, err := readWholeFile(fs, stubPath)
	if err != nil {
		t.Fatal(err)
	}
	st, err := segment.ParseStub(data)
	if err != nil {
		t.Fatal(err)
	}
	var kept []segment.Record
	for _, r := range st.Kept {
		if string(r.Key) != "K" {
			kept = append(kept, r)
		}
	}
	if len(kept) != len(st.Kept)-1 {
		t.Fatal("the stub did not keep K's delete")
	}
	st.Kept = kept
	f, err := fs.Create(stubPath, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(segment.AppendStub(nil, &st)); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		t.Fatal(err)
	}
	if kinds := rebuildFromSnapshot(t, opts); !kinds[EventStateFromSnapshot] {
		t.Fatalf("the rebuild did not start from the snapshot: %v", kinds)
	}
	db = mustOpen(t, fs, opts)
	if v, err := db.Get(ctx, []byte("K")); err != nil || string(v.Value) != "y" {
		t.Fatalf("Get(K) = %q, %v", v.Value, err)
	}
	wantFinding(t, db, errs.CodeIndexMismatch, "A", 1, `no 'k' row for key "K" at the rebuilt frontier`)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := RebuildIndexWith(ctx, "db", opts, RebuildOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	db2 := mustOpen(t, fs, opts)
	defer db2.Close()
	if v, err := db2.Get(ctx, []byte("K")); err != nil || string(v.Value) != "y" {
		t.Fatalf("Get(K) after the full rebuild = %q, %v", v.Value, err)
	}
	if rep, err := db2.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("after a full rebuild: %v %+v", err, rep.Failures)
	}
}
