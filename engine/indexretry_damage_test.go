package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestIndexRetryKeepsDamage: damage the first try's recovery found (here
// settled records the index vouches for missing from a segment: the anchor
// becomes read-only, SPEC §3) survives Open's second try. When the first
// try gets through recovery and a corruption held at the gate sends the
// index to lost+found, the evidence (the index's rows, and the journal that
// startJournal replaced) is gone, so the second try marks the anchor
// damaged again before the rebuild, which then leaves its files alone: the
// report says so, nothing of the anchor is cut, and it refuses writes.
func TestIndexRetryKeepsDamage(t *testing.T) {
	mem := vfs.NewCrashableMem()
	db := mustOpen(t, mem, crashOptions(mem, false))
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		if _, err := db.Put(ctx, "a", []byte("k"), []byte(strings.Repeat("v", 30))); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.settle(); err != nil {
		t.Fatal(err)
	}
	crashed := testutil.CrashClone(mem, vfs.CrashCloneCfg{})
	_ = db.Close()
	segs := testutil.SegmentFiles(t, crashed, "db", "a")
	newest := segs[len(segs)-1]
	data, err := testutil.ReadFile(crashed, newest)
	if err != nil {
		t.Fatal(err)
	}
	// Drop the last (settled) record: keep the bytes up to its frame.
	cut := len(data) - 1
	for cut > 0 && len(data)-cut < 40 {
		cut--
	}
	testutil.WriteFile(crashed, newest, data[:cut])

	damaged := func(db *DB) bool {
		for _, ev := range db.RecoveryReport().Events {
			if ev.Kind == EventDamaged && ev.Anchor == "a" {
				return true
			}
		}
		return false
	}
	plain := testutil.CrashClone(crashed, vfs.CrashCloneCfg{})
	db = mustOpen(t, plain, crashOptions(plain, false))
	if !damaged(db) {
		t.Fatalf("scenario: no damage without the retry: %v", db.RecoveryReport().Events)
	}
	_ = db.Close()

	fs, o := corruptionOnJournalCreate(crashed)
	db = mustOpen(t, fs, o)
	defer db.Close()
	t.Logf("events after the retry: %v", db.RecoveryReport().Events)
	if !damaged(db) {
		t.Fatalf("the first try found anchor a damaged; after the retry the report says nothing of it: %v", db.RecoveryReport().Events)
	}
	if _, err := db.Put(ctx, "a", []byte("k2"), []byte("after the hole")); err == nil {
		t.Fatal("anchor a, found damaged, takes writes after the retry")
	}
	for _, ev := range db.RecoveryReport().Events {
		if ev.Kind == EventCut && ev.Anchor == "a" {
			t.Fatalf("the damaged anchor's segment was cut after the retry: %v", ev)
		}
	}
}
