package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/journal"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// journalFileSize is the size of the database's current journal file and
// where its blocks end.
func journalFileSize(t *testing.T, db *DB) (size, end int64) {
	t.Helper()
	p := db.journal.End()
	st, err := db.fs.Stat(db.fs.PathJoin(db.journalDir(), journal.FileName(p.Gen)))
	if err != nil {
		t.Fatal(err)
	}
	return st.Size(), p.Off
}

// By default the journal is kept extended with zeros past its last block
// (so fsyncs overwrite rather than grow it); a crash that leaves the zeros
// is a clean end of the log, not a torn one, and every acknowledged append is
// there. JournalPrealloc < 0 turns it off.
func TestJournalPreallocation(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	db := mustOpen(t, fs, memOpts(fs))
	for i := 0; i < 5; i++ {
		if _, err := db.Put(ctx, "dev", []byte(fmt.Sprint("k", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	size, end := journalFileSize(t, db)
	// A small file gets zeros 1/64 of the default ahead: at least half that.
	if want := end + journal.DefaultPrealloc/64/2; size < want {
		t.Fatalf("journal file is %d bytes with blocks to %d; want at least %d", size, end, want)
	}
	crashed := testutil.CrashClone(fs, vfs.CrashCloneCfg{})
	_ = db.Close()

	db = mustOpen(t, crashed, memOpts(crashed))
	for _, ev := range db.RecoveryReport().Events {
		if ev.Kind == EventJournalEnd {
			t.Fatalf("recovery reported the preallocated zeros as a journal end: %+v", ev)
		}
	}
	for i := 0; i < 5; i++ {
		if _, err := db.Get(ctx, []byte(fmt.Sprint("k", i))); err != nil {
			t.Fatalf("k%d after the crash: %v", i, err)
		}
	}
	_ = db.Close()

	off := vfs.NewMem()
	opts := memOpts(off)
	opts.JournalPrealloc = -1
	db = mustOpen(t, off, opts)
	defer db.Close()
	if _, err := db.Put(ctx, "dev", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if size, end := journalFileSize(t, db); size != end {
		t.Fatalf("JournalPrealloc -1: journal file is %d bytes with blocks to %d", size, end)
	}
}

func TestJournalPreallocationBound(t *testing.T) {
	fs := vfs.NewMem()
	opts := memOpts(fs)
	opts.JournalPrealloc = 1<<30 + 1
	_, err := Open("db", opts)
	if errs.CodeOf(err) != errs.CodeInvalidInput {
		t.Fatalf("open with a preallocation above 1 GiB: %v, want INPUT_001", err)
	}
}
