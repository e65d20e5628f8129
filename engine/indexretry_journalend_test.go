package engine

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/anchordb/anchordb/internal/journal"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestIndexRetryKeepsJournalEnd: a first try that gets through recovery
// (reporting where a torn journal ended) and then has its index taken away
// by a corruption held at the gate has already replaced the journal
// (startJournal removed the old files): the second try cannot see the torn
// journal, so only the first try can report journal_end. It is not among
// carriedEvents, and the report after the retry loses it.
func TestIndexRetryKeepsJournalEnd(t *testing.T) {
	mem := vfs.NewCrashableMem()
	opts := crashOptions(mem, false)
	opts.JournalPrealloc = -1
	db := mustOpen(t, mem, opts)
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if _, err := db.Put(ctx, "a", []byte("k"), []byte(strings.Repeat("v", 30))); err != nil {
			t.Fatal(err)
		}
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	_ = db.Close()
	gens, err := journal.List(crashed, "db/journal")
	if err != nil || len(gens) == 0 {
		t.Fatal(gens, err)
	}
	newest := crashed.PathJoin("db/journal", journal.FileName(gens[len(gens)-1]))
	patchFile(t, crashed, newest, func(b []byte) []byte { return b[:len(b)-3] })

	// Without the gate: the report names the torn journal.
	plain := crashed.CrashClone(vfs.CrashCloneCfg{})
	db = mustOpen(t, plain, crashOptions(plain, false))
	has := func(db *DB, kind string) bool {
		for _, ev := range db.RecoveryReport().Events {
			if ev.Kind == kind {
				return true
			}
		}
		return false
	}
	if !has(db, EventJournalEnd) {
		t.Fatalf("scenario: no journal_end without the retry: %v", db.RecoveryReport().Events)
	}
	_ = db.Close()

	// With a corruption reported during Open (held by the gate).
	var handler atomic.Pointer[func(pebble.DataCorruptionInfo)]
	var phase atomic.Int64
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpCreate && strings.HasPrefix(op.Path, "db/journal/") && phase.CompareAndSwap(0, 1) {
			(*handler.Load())(pebble.DataCorruptionInfo{Path: "db/index/000012.sst", Details: errors.New("block checksum mismatch")})
		}
		return nil
	})
	fs := errorfs.Wrap(crashed, inj)
	o := crashOptions(fs, false)
	o.PebbleOptions = func(po *pebble.Options) {
		h := po.EventListener.DataCorruption
		handler.Store(&h)
	}
	db = mustOpen(t, fs, o)
	defer db.Close()
	if !has(db, EventIndexUnreadable) {
		t.Fatalf("scenario: no retry: %v", db.RecoveryReport().Events)
	}
	if !has(db, EventJournalEnd) {
		t.Fatalf("the first try reported where the torn journal ended, then replaced the journal; the retried Open's report lost it: %v", db.RecoveryReport().Events)
	}
}
