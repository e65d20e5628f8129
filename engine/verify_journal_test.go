package engine

import (
	"context"
	"path"
	"sync/atomic"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/journal"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestVerifyJournalFileRemovedBySettle: verify lists journal/ while the
// database runs, and a settle may remove an old journal file between the
// listing and the look at it. That file is gone, not a dangling link: it
// is no finding. The removal is made to happen right at verify's Stat of
// the file.
func TestVerifyJournalFileRemovedBySettle(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	var armed atomic.Bool
	var removed atomic.Int32
	jdir := mem.PathJoin("db", JournalDir)
	old := mem.PathJoin(jdir, journal.FileName(1))
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpStat && op.Path == old && armed.CompareAndSwap(true, false) {
			if err := mem.Remove(old); err == nil {
				removed.Add(1)
			}
		}
		return nil
	}))
	db := mustOpen(t, fs, Options{SegmentSize: 4096})
	defer db.Close()
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := db.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	gens, err := journal.List(mem, jdir)
	if err != nil || len(gens) == 0 || gens[0] == 1 {
		t.Fatalf("journal generations %v %v; want the first one gone", gens, err)
	}
	// An old journal file, as a settle about to remove it leaves it.
	f, err := mem.Create(old, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	armed.Store(true)
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if removed.Load() != 1 {
		t.Fatal("verify never looked at the old journal file: the test proves nothing")
	}
	if !rep.OK {
		t.Fatalf("verify: %+v; a journal file removed since it was listed is no finding", rep.Failures)
	}
}

// TestVerifyJournalStatErrorIsIO: a failed look at a journal entry says
// nothing of what it is. verify fails with IO_001 and reports no finding:
// it does not claim the journal damaged.
func TestVerifyJournalStatErrorIsIO(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	var armed atomic.Bool
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpStat && armed.Load() {
			if ok, _ := path.Match("db/"+JournalDir+"/*.log", op.Path); ok {
				return errorfs.ErrInjected
			}
		}
		return nil
	}))
	db := mustOpen(t, fs, Options{SegmentSize: 4096})
	defer db.Close()
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	rep, err := db.Verify(ctx, VerifyOptions{})
	armed.Store(false)
	if errs.CodeOf(err) != errs.CodeWriteFailed {
		t.Fatalf("verify: %v; want IO_001", err)
	}
	if len(rep.Failures) != 0 {
		t.Fatalf("verify findings %+v; a failed stat is none", rep.Failures)
	}
}
