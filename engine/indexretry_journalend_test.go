package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/internal/journal"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestIndexRetryKeepsJournalEnd: a first try that gets through recovery
// (reporting where a torn journal ended) and then has its index taken away
// by a corruption held at the gate has already replaced the journal
// (startJournal removed the old files): the second try cannot see the torn
// journal, so the report keeps the first try's journal_end.
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
	crashed := testutil.CrashClone(mem, vfs.CrashCloneCfg{})
	_ = db.Close()
	gens, err := journal.List(crashed, "db/journal")
	if err != nil || len(gens) == 0 {
		t.Fatal(gens, err)
	}
	newest := crashed.PathJoin("db/journal", journal.FileName(gens[len(gens)-1]))
	patchFile(t, crashed, newest, func(b []byte) []byte { return b[:len(b)-3] })

	// Without the gate: the report names the torn journal.
	plain := testutil.CrashClone(crashed, vfs.CrashCloneCfg{})
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
	fs, o := corruptionOnJournalCreate(crashed)
	log := &recordingLogger{}
	o.Logger = log
	db = mustOpen(t, fs, o)
	defer db.Close()
	if !has(db, EventIndexUnreadable) {
		t.Fatalf("scenario: no retry: %v", db.RecoveryReport().Events)
	}
	if !has(db, EventJournalEnd) {
		t.Fatalf("the first try reported where the torn journal ended, then replaced the journal; the retried Open's report lost it: %v", db.RecoveryReport().Events)
	}
	// The first try logged its events when its recovery ended; the second
	// try reports the ones it carried over, but must not log them again.
	// (Its own events, say an anchor adopted into the rebuilt index, are
	// its own to log, even when the first try logged the same words.)
	log.mu.Lock()
	defer log.mu.Unlock()
	count := map[string]int{}
	for _, line := range log.infos {
		count[line]++
	}
	for _, ev := range db.RecoveryReport().Events {
		line := "recovery: " + ev.String()
		switch n := count[line]; {
		case n == 0:
			t.Errorf("never logged: %s", line)
		case n > 1 && (ev.Kind == EventJournalEnd || ev.Kind == EventRestored):
			t.Errorf("a carried event logged %d times: %s", n, line)
		}
	}
}
