package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The outbox is a projection of its records: these tests take it through
// what the engine does to records — a truncating compaction, an index
// rebuild, an ingest into another database — and find every entry as it
// was, claimable as it was, and verifying.

// fillOutbox takes outbox ob through every state: n entries, most done,
// some dead, some requeued, the rest pending or inflight.
func fillOutbox(t *testing.T, ob *Outbox, clk *clock, n int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i += 50 {
		var ms []Message
		for j := i; j < min(i+50, n); j++ {
			ms = append(ms, Message{ID: fmt.Sprintf("e%04d", j), Payload: []byte(fmt.Sprintf("payload %d", j)), Destination: "https://example.org/hook"})
		}
		if _, err := ob.EnqueueBatch(ctx, ms); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := ob.Claim(ctx, "w", n-n/10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cs {
		switch {
		case i%20 == 0:
			if _, err := ob.Fail(ctx, *c.Lease, Permanent(errors.New("no such customer"))); err != nil {
				t.Fatal(err)
			}
		case i%20 == 1:
			// left inflight
		default:
			if _, err := ob.Complete(ctx, *c.Lease, []byte("ok")); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, c := range cs {
		if i%40 == 0 {
			if _, err := ob.Requeue(ctx, c.ID, AutoID, By("ops")); err != nil {
				t.Fatal(err)
			}
		}
	}
	clk.Add(time.Second)
}

// snapshotEntries returns every entry of ob by id.
func snapshotEntries(t *testing.T, ob *Outbox) map[string]Entry {
	t.Helper()
	all, err := ob.List(context.Background(), ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]Entry{}
	for _, e := range all {
		m[e.ID] = e
	}
	return m
}

func sameEntries(t *testing.T, what string, got, want map[string]Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d entries, want %d", what, len(got), len(want))
	}
	for id, w := range want {
		g := got[id]
		g.Receipt.Counter, w.Receipt.Counter = 0, 0 // an ingest keeps seqs and hashes; counters too, but be lenient
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("%s: entry %s\n got %+v\nwant %+v", what, id, g, w)
		}
	}
}

func TestSurvivesTruncatingCompactionAndRebuild(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	opts := engine.Options{FS: fs, SegmentSize: 4096}
	db, err := engine.Open("db", opts)
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	oopts := Options{Clock: clk.Now, FlushInterval: -1}
	ob, err := Open(ctx, db, "billing", oopts)
	if err != nil {
		t.Fatal(err)
	}
	// Entries delivered one after another: an entry's enqueue and claim
	// records are not the last of its row in their segment, so the
	// compaction keeps no copy of them and the log has gaps.
	for j := range 60 {
		id := fmt.Sprintf("q%03d", j)
		if _, err := ob.Enqueue(ctx, Message{ID: id, Payload: []byte(id)}); err != nil {
			t.Fatal(err)
		}
		cs, err := ob.Claim(ctx, "w", 1, time.Minute)
		if err != nil || len(cs) != 1 || cs[0].ID != id {
			t.Fatalf("claim of %s: %v %v", id, cs, err)
		}
		if _, err := ob.Complete(ctx, *cs[0].Lease, []byte("ok")); err != nil {
			t.Fatal(err)
		}
	}
	fillOutbox(t, ob, clk, 300)
	// Some changes stay past the mark, unflushed, in the log only.
	if err := ob.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Enqueue(ctx, Message{ID: "late", Payload: []byte("late")}); err != nil {
		t.Fatal(err)
	}
	want := snapshotEntries(t, ob)
	if err := ob.Close(); err != nil {
		t.Fatal(err)
	}

	skey, _, err := proof.GenerateKeys("test.example/outbox")
	if err != nil {
		t.Fatal(err)
	}
	pol := snapshot.DefaultPolicy()
	pol.RawLog, pol.KeepSnapshots, pol.Snapshot.EveryRecords = snapshot.RawLogTruncate, 1, 1
	// The first run takes a snapshot; the second cuts the log below it,
	// inside the checkpoint signed before it.
	var removed int64
	for range 2 {
		if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
			t.Fatal(err)
		}
		res, err := db.Compact(ctx, pol, engine.CompactOptions{Apply: true})
		if err != nil {
			t.Fatalf("compact: %v", err)
		}
		removed += res.RemovedBytes
	}
	if removed == 0 {
		t.Fatal("the compactions removed nothing")
	}

	check := func(what string) {
		t.Helper()
		ob, err := Open(ctx, db, "billing", oopts)
		if err != nil {
			t.Fatalf("%s: open: %v", what, err)
		}
		sameEntries(t, what, snapshotEntries(t, ob), want)
		rep, err := ob.Verify(ctx)
		if err != nil || !rep.OK {
			t.Fatalf("%s: verify: %v %+v", what, err, rep.Failures)
		}
		if !rep.Truncated {
			t.Fatalf("%s: verify did not notice the truncated log", what)
		}
		if err := ob.Close(); err != nil {
			t.Fatal(err)
		}
	}
	check("after a truncating compaction")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.RebuildIndex(ctx, "db", opts, true); err != nil {
		t.Fatal(err)
	}
	if db, err = engine.Open("db", opts); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	check("after rebuilding the index")

	// It goes on: the pending entries are claimed, the inflight ones once
	// their leases expire.
	ob, err = Open(ctx, db, "billing", oopts)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	clk.Add(time.Hour)
	var pending, inflight int
	for _, e := range want {
		switch e.State {
		case StatePending:
			pending++
		case StateInflight:
			inflight++
		}
	}
	cs, err := ob.Claim(ctx, "w2", MaxClaim, time.Minute)
	if err != nil || len(cs) != pending+inflight {
		t.Fatalf("claim after compaction: %d entries, %v; want %d", len(cs), err, pending+inflight)
	}
	mustVerify(t, ob)
}

func TestSurvivesIngest(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	clk := newClock()
	oopts := Options{Clock: clk.Now, FlushInterval: -1}
	open := func(dir string) (*engine.DB, *Outbox) {
		t.Helper()
		db, err := engine.Open(dir, engine.Options{FS: fs, SegmentSize: 4096})
		if err != nil {
			t.Fatal(err)
		}
		ob, err := Open(ctx, db, "billing", oopts)
		if err != nil {
			t.Fatal(err)
		}
		return db, ob
	}
	closeBoth := func(db *engine.DB, ob *Outbox) {
		t.Helper()
		if err := ob.Close(); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}

	// A database with an outbox, and an empty one that ingests it.
	dbA, obA := open("a")
	fillOutbox(t, obA, clk, 120)
	want := snapshotEntries(t, obA)
	closeBoth(dbA, obA)
	dbB, err := engine.Open("b", engine.Options{FS: fs, SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dbB.Ingest(ctx, "a", engine.IngestOptions{}); err != nil {
		t.Fatal(err)
	}
	obB, err := Open(ctx, dbB, "billing", oopts)
	if err != nil {
		t.Fatal(err)
	}
	sameEntries(t, "after an ingest", snapshotEntries(t, obB), want)
	mustVerify(t, obB)
	closeBoth(dbB, obB)

	// The first database goes on; the second ingests what it did since,
	// and its outbox is the first's again.
	dbA, obA = open("a")
	clk.Add(time.Hour)
	cs, err := obA.Claim(ctx, "w", MaxClaim, time.Minute)
	if err != nil || len(cs) == 0 {
		t.Fatalf("claim: %d, %v", len(cs), err)
	}
	for _, c := range cs {
		if _, err := obA.Complete(ctx, *c.Lease, nil); err != nil {
			t.Fatal(err)
		}
	}
	want = snapshotEntries(t, obA)
	closeBoth(dbA, obA)
	if dbB, err = engine.Open("b", engine.Options{FS: fs, SegmentSize: 4096}); err != nil {
		t.Fatal(err)
	}
	defer dbB.Close()
	rep, err := dbB.Ingest(ctx, "a", engine.IngestOptions{})
	if err != nil || rep.Appended == 0 {
		t.Fatalf("second ingest: %+v %v", rep, err)
	}
	if obB, err = Open(ctx, dbB, "billing", oopts); err != nil {
		t.Fatal(err)
	}
	defer obB.Close()
	sameEntries(t, "after a second ingest", snapshotEntries(t, obB), want)
	st, err := obB.Stats(ctx)
	if err != nil || st.Pending+st.Inflight != 0 || st.Done+st.Dead+st.Aborted != int64(len(want)) {
		t.Fatalf("stats after the second ingest: %+v %v", st, err)
	}
	mustVerify(t, obB)
}

// TestFlushInParts: when the entries changed since the mark would not fit
// one batch, a flush takes an earlier watermark — those changed up to it —
// and the next flush the rest; after each the rows and the mark agree
// with the log.
func TestFlushInParts(t *testing.T) {
	defer func(e int) { maxFlushEntries = e }(maxFlushEntries)
	maxFlushEntries = 3
	ctx := context.Background()
	ob, db, clk := testOutbox(t, Options{})
	for i := 0; i < 10; i++ {
		if _, err := ob.Enqueue(ctx, Message{ID: fmt.Sprintf("p%02d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := ob.Claim(ctx, "w", 4, time.Minute)
	if err != nil || len(cs) != 4 {
		t.Fatal(cs, err)
	}
	if _, err := ob.Complete(ctx, *cs[0].Lease, nil); err != nil {
		t.Fatal(err)
	}
	for flushes := 0; ; flushes++ {
		st, err := ob.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Unflushed == 0 {
			if flushes < 4 {
				t.Fatalf("%d flushes for 10 entries three at a time", flushes)
			}
			break
		}
		before := st.Watermark
		if err := ob.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if st, _ := ob.Stats(ctx); st.Watermark <= before {
			t.Fatalf("a flush did not move the watermark from %d", before)
		}
		mustVerify(t, ob)
	}
	clk.Add(time.Hour)
	want := snapshotEntries(t, ob)
	if err := ob.Close(); err != nil {
		t.Fatal(err)
	}
	ob2, err := Open(ctx, db, "billing", Options{Clock: clk.Now, FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ob2.Close()
	sameEntries(t, "after flushes in parts", snapshotEntries(t, ob2), want)
	if cs, err := ob2.Claim(ctx, "w", MaxClaim, time.Minute); err != nil || len(cs) != 9 {
		t.Fatalf("claim of the 6 pending and 3 expired: %d, %v", len(cs), err)
	}
}

// TestVerifyAfterTruncationCutARequeuesSuccessor: a truncating compaction
// keeps a requeue's record (the last of the old id's row in its segment)
// but may drop the successor's first record right after it (the
// successor's row moved on in the same segment). Verify takes the gap for
// a gap, not for a requeue without its successor.
func TestVerifyAfterTruncationCutARequeuesSuccessor(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	opts := engine.Options{FS: fs, SegmentSize: 4096, SettleBytes: 8 << 10}
	db, err := engine.Open("db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	clk := newClock()
	ob, err := Open(ctx, db, "billing", Options{Clock: clk.Now, FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	if _, err := ob.Enqueue(ctx, Message{ID: "c", Payload: []byte("p0")}); err != nil {
		t.Fatal(err)
	}
	cs, err := ob.Claim(ctx, "w", 1, time.Second)
	if err != nil || len(cs) != 1 {
		t.Fatal(cs, err)
	}
	if _, err := ob.Fail(ctx, *cs[0].Lease, Permanent(errors.New("no"))); err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Requeue(ctx, "c", NewID("n1"), PatchPayload([]byte("p2"))); err != nil {
		t.Fatal(err)
	}
	if cs, err = ob.Claim(ctx, "w", 1, time.Second); err != nil || len(cs) != 1 || cs[0].ID != "n1" {
		t.Fatal(cs, err)
	}
	if err := ob.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	skey, _, err := proof.GenerateKeys("test.example/outbox")
	if err != nil {
		t.Fatal(err)
	}
	pol := snapshot.DefaultPolicy()
	pol.RawLog, pol.KeepSnapshots, pol.Snapshot.EveryRecords = snapshot.RawLogTruncate, 1, 1
	for range 2 {
		if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Compact(ctx, pol, engine.CompactOptions{Apply: true}); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := ob.Verify(ctx)
	if err != nil || !rep.OK || !rep.Truncated {
		t.Fatalf("verify after the truncation: %v ok=%v truncated=%v %v", err, rep.OK, rep.Truncated, rep.Failures)
	}
}

// TestVerifyWhenTruncationCutBelowTheMark: with the outbox open, a
// truncating compaction removes an entry's record from below the mark
// (the entry moved on in the same segment) while the mark stays where it
// was until the next flush. The states at the mark cannot be replayed
// then, and Verify does not take the rows and counts there for wrong.
func TestVerifyWhenTruncationCutBelowTheMark(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	opts := engine.Options{FS: fs, SegmentSize: 4096, SettleBytes: 8 << 10}
	db, err := engine.Open("db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	clk := newClock()
	ob, err := Open(ctx, db, "billing", Options{Clock: clk.Now, FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	for _, id := range []string{"a", "b"} {
		if _, err := ob.Enqueue(ctx, Message{ID: id, Payload: []byte("p0")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ob.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Requeue(ctx, "a", NewID("n2")); err != nil {
		t.Fatal(err)
	}
	// Entries that fill the segment, so that the cut passes a's records.
	for i := range 12 {
		if _, err := ob.Enqueue(ctx, Message{ID: fmt.Sprint("f", i), Payload: bytes.Repeat([]byte{'v'}, 300)}); err != nil {
			t.Fatal(err)
		}
	}
	skey, _, err := proof.GenerateKeys("test.example/outbox")
	if err != nil {
		t.Fatal(err)
	}
	pol := snapshot.DefaultPolicy()
	pol.RawLog, pol.KeepSnapshots, pol.Snapshot.EveryRecords = snapshot.RawLogTruncate, 1, 1
	for range 2 {
		if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Compact(ctx, pol, engine.CompactOptions{Apply: true}); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := ob.Verify(ctx)
	if err != nil || !rep.OK {
		t.Fatalf("verify after the truncation: %v ok=%v truncated=%v %v", err, rep.OK, rep.Truncated, rep.Failures)
	}
	if !rep.Truncated {
		t.Fatal("the compaction cut nothing of the outbox's anchor: the test does not test")
	}
	// A flush moves the mark past the cut, and the rows are checked again.
	if _, err := ob.Enqueue(ctx, Message{ID: "c"}); err != nil {
		t.Fatal(err)
	}
	if err := ob.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, ob)
}
