package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestRecoveryJournalReadErrors fails, one at a time, every operation that
// recovery makes on the journal files (stats, opens, reads) of a crashed
// database whose newest records are only in the segments and the journal.
// A failed read says nothing about what the file holds: Open must fail with
// IO_001, never with an integrity code (the journal was reported as
// INT_004 whatever made it unreadable), and a reopen without the failure
// must recover every acknowledged append with no anchor marked damaged.
func TestRecoveryJournalReadErrors(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	db := mustOpen(t, mem, Options{SegmentSize: 4096, SettleBytes: 1 << 30, SettleInterval: time.Hour})
	acks := &ackLog{}
	if err := workload(ctx, db, 1, 21, acks); err != nil {
		t.Fatal(err)
	}
	if err := db.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	// New records after the settle: only the journal vouches for them.
	if err := workload(ctx, db, 1, 14, acks); err != nil {
		t.Fatal(err)
	}
	crashed := testutil.CrashClone(mem, vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: newRand(5)})
	_ = db.Close()
	acked := acks.snapshot()

	isJournalRead := errorfs.And(errorfs.PathMatch("db/journal/*.log"), errorfs.Reads)
	fired := 0
	for i := 0; ; i++ {
		if i == 1000 {
			t.Fatal("recovery still reads the journal after 1000 operations")
		}
		state := testutil.CrashClone(crashed, vfs.CrashCloneCfg{})
		rec := &recordingInjector{Injector: errorfs.ErrInjected.If(errorfs.And(isJournalRead, errorfs.OnIndex(int32(i))))}
		db, err := Open("db", Options{FS: errorfs.Wrap(state, rec), SegmentSize: 4096})
		op := rec.fired.Load()
		if op == nil {
			if err != nil {
				t.Fatalf("open with no failure injected: %v", err)
			}
			_ = db.Close()
			break
		}
		fired++
		what := fmt.Sprintf("journal op %d (%s)", i, opString([]errorfs.Op{*op}))
		if err == nil {
			// Only a read the recovery can do without is allowed to fail
			// unseen; none of the journal's is.
			_ = db.Close()
			t.Errorf("%s: open succeeded", what)
			continue
		}
		if code := errs.CodeOf(err); code != errs.CodeWriteFailed || errs.IsCorruption(err) {
			t.Errorf("%s: open failed with %s (%v); want IO_001: a failed read is no integrity finding", what, code, err)
		}
		// Nothing was marked or changed: without the failure, the database
		// recovers in full.
		db2, err := Open("db", Options{FS: state, SegmentSize: 4096})
		if err != nil {
			t.Fatalf("%s: reopen without the failure: %v", what, err)
		}
		for _, a := range acked {
			if r, err := db2.Record(ctx, a.Receipt.Anchor, a.Seq); err != nil || r.Hash != a.Hash {
				t.Errorf("%s: reopen lacks %s/%d: %v", what, a.Receipt.Anchor, a.Seq, err)
			}
		}
		for info, err := range db2.Anchors(ctx) {
			if err == nil && info.Damage != "" {
				t.Errorf("%s: anchor %s marked damaged: %s", what, info.ID, info.Damage)
			}
		}
		_ = db2.Close()
	}
	if fired == 0 {
		t.Fatal("recovery read no journal file: the test injects nothing")
	}
	t.Logf("%d journal reads failed in turn", fired)
}
