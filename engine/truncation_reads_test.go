package engine

// Reads that run across a truncation: they answer from what the log still
// holds or refuse a gap (STATE_003), and never report a broken chain
// (INT_002) on a healthy database.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/merge"
	"github.com/cockroachdb/pebble/v2/vfs"
)

func fillOutOfLine(t *testing.T, db *DB, anchor string, n int) {
	t.Helper()
	ctx := context.Background()
	val := bytes.Repeat([]byte("v"), 200) // above InlineValueMax: read from the segment
	for i := 0; i < n; i++ {
		if _, err := db.Put(ctx, anchor, []byte(fmt.Sprintf("key-%04d", i)), val); err != nil {
			t.Fatal(err)
		}
	}
}

// A Scan that runs across a truncation of the segments its versions live
// in goes on: the row it read names a removed segment, and the read then
// finds the record kept (the key's last version there) by the truncation.
func TestScanAcrossATruncation(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{SegmentSize: 4096, InlineValueMax: 64})
	defer db.Close()
	fillOutOfLine(t, db, "a", 200)
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil { // S1
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "a", []byte("other"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	n := 0
	compacted := false
	for v, err := range db.Scan(ctx, []byte("key-")) {
		if err != nil {
			t.Fatalf("Scan after %d keys, across a compaction: %v (code %s); a healthy database reported as damaged", n, err, CodeOf(err))
		}
		_ = v
		n++
		if !compacted {
			compacted = true
			res, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true})
			if err != nil || res.RemovedBytes == 0 {
				t.Fatalf("compact: %v %s", err, res.Plan)
			}
		}
	}
	if n != 200 {
		t.Fatalf("scan returned %d keys, want 200", n)
	}
}

// Merged across a truncation: the records it had not read yet are gone, so
// it cannot go on, and says so with STATE_003 — not INT_002, and not by
// leaving records out.
func TestMergedAcrossATruncation(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{SegmentSize: 4096, InlineValueMax: 64})
	defer db.Close()
	fillOutOfLine(t, db, "a", 600)
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil { // S1
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "a", []byte("other"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	var prev uint64
	compacted := false
	count := 0
	for p, err := range db.Merged(ctx, MergedOptions{}) {
		if err != nil {
			if !errors.Is(err, ErrDependencyMissing) {
				t.Fatalf("Merged across a compaction failed after seq %d with %v; want STATE_003", prev, err)
			}
			return
		}
		if p.Record.Seq != prev+1 {
			t.Fatalf("Merged across a compaction jumped from seq %d to seq %d (pos %d) without an error: %d records silently left out",
				prev, p.Record.Seq, p.Pos, p.Record.Seq-prev-1)
		}
		prev = p.Record.Seq
		count++
		if !compacted {
			compacted = true
			res, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true})
			if err != nil || res.RemovedBytes == 0 {
				t.Fatalf("compact: %v %s", err, res.Plan)
			}
		}
	}
	if count != 601 {
		t.Fatalf("Merged gave %d records, want 601", count)
	}
}

// Merged across a truncation that removes every record one of its refills
// would read: the empty refill is a gap too (STATE_003), not the end of the
// stream.
func TestMergedAcrossATruncatedRefill(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{SegmentSize: 4096, InlineValueMax: 64})
	defer db.Close()
	fillOutOfLine(t, db, "a", 600)
	if _, err := db.Compact(ctx, truncatePolicy, CompactOptions{Apply: true}); err != nil { // S1
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "a", []byte("other"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	coverKeysCheckpoint(t, db)
	var prev uint64
	compacted := false
	count := 0
	for p, err := range db.Merged(ctx, MergedOptions{Frontier: merge.Frontier{"a": 400}}) {
		if err != nil {
			if !errors.Is(err, ErrDependencyMissing) {
				t.Fatalf("Merged failed after seq %d with %v; want STATE_003", prev, err)
			}
			return
		}
		if p.Record.Seq != prev+1 {
			t.Fatalf("Merged jumped from seq %d to %d without an error", prev, p.Record.Seq)
		}
		prev = p.Record.Seq
		count++
		if !compacted {
			compacted = true
			res, err := db.Compact(ctx, truncatePolicy, CompactOptions{Apply: true})
			if err != nil || res.RemovedBytes == 0 {
				t.Fatalf("compact: %v %s", err, res.Plan)
			}
			first, _ := db.firstPresent("a")
			t.Logf("cut now at seq %d", first-1)
		}
	}
	if count != 400 {
		t.Fatalf("Merged at frontier a:400 across a truncation gave %d records (last seq %d) and no error; want 400 records or STATE_003", count, prev)
	}
}

// Merged after an earlier frontier inside the truncated log: it neither
// silently starts at the cut nor gives up — the records from there to the
// cut are the copies the compaction kept (here every one: each record is
// its key's last in its segment), yielded in their places (a gone run would
// be STATE_003 in place; TestMergedAfterTruncationKeepsPositions).
func TestMergedAfterInsideTheCut(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{SegmentSize: 4096, InlineValueMax: 64})
	defer db.Close()
	fillOutOfLine(t, db, "a", 600)
	coverKeysCheckpoint(t, db)
	if _, err := db.Compact(ctx, truncatePolicy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "a", []byte("other"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	coverKeysCheckpoint(t, db)
	if res, err := db.Compact(ctx, truncatePolicy, CompactOptions{Apply: true}); err != nil || res.RemovedBytes == 0 {
		t.Fatalf("compact: %v %s", err, res.Plan)
	}
	first, _ := db.firstPresent("a")
	if first < 200 {
		t.Fatalf("cut at %d", first-1)
	}
	next := uint64(101)
	for p, err := range db.Merged(ctx, MergedOptions{After: merge.Frontier{"a": 100}}) {
		if err != nil {
			t.Fatalf("Merged{After: a:100} on a log cut at seq %d: %v after seq %d; every record from there was kept", first-1, err, next-1)
		}
		if p.Seq != next || p.Pos != next-100 {
			t.Fatalf("Merged{After: a:100}: seq %d at position %d, want seq %d at %d", p.Seq, p.Pos, next, next-100)
		}
		next++
	}
	if next != 602 {
		t.Fatalf("Merged{After: a:100} on a log cut at seq %d ended after seq %d of 601", first-1, next-1)
	}
}

// The same hole when the next refill starts right at the cut: the empty
// refill before it is the gap, STATE_003, not a density failure of the
// merge (INT_002) on a healthy database. After lines the refills up with
// the cut; with many anchors (refills of 4 records) it happens by chance.
func TestMergedAcrossACutAtARefill(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{SegmentSize: 4096, InlineValueMax: 64})
	defer db.Close()
	fillOutOfLine(t, db, "a", 600)
	if _, err := db.Compact(ctx, truncatePolicy, CompactOptions{Apply: true}); err != nil { // S1
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "a", []byte("other"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	coverKeysCheckpoint(t, db)
	dry, err := db.Compact(ctx, truncatePolicy, CompactOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cut uint64
	for _, a := range dry.Plan.Actions {
		if a.Kind == "record_cut" {
			cut = a.CutSeq
		}
	}
	if cut < 600-76 || cut <= 512 {
		t.Fatalf("planned cut %d", cut)
	}
	after := cut - 512 // refills [after+1..after+256], [after+257..cut], [cut+1..]
	var prev uint64
	compacted := false
	count := 0
	for p, err := range db.Merged(ctx, MergedOptions{After: merge.Frontier{"a": after}}) {
		if err != nil {
			if !errors.Is(err, ErrDependencyMissing) {
				t.Fatalf("Merged failed after seq %d with %v; want STATE_003", prev, err)
			}
			return
		}
		if prev != 0 && p.Record.Seq != prev+1 {
			t.Fatalf("Merged (After a:%d) across a truncation jumped from seq %d to seq %d without an error: %d records silently left out (cut %d); want STATE_003",
				after, prev, p.Record.Seq, p.Record.Seq-prev-1, cut)
		}
		prev = p.Record.Seq
		count++
		if !compacted {
			compacted = true
			res, err := db.Compact(ctx, truncatePolicy, CompactOptions{Apply: true})
			if err != nil || res.RemovedBytes == 0 {
				t.Fatalf("compact: %v %s", err, res.Plan)
			}
			if first, _ := db.firstPresent("a"); first-1 != cut {
				t.Fatalf("cut at %d, planned %d", first-1, cut)
			}
		}
	}
	t.Logf("Merged gave %d records", count)
}

// coverKeysCheckpoint stores a signed checkpoint of the current heads, which
// a later truncation's cut must lie inside.
func coverKeysCheckpoint(t *testing.T, db *DB) {
	t.Helper()
	skey, _ := coverKeys(t)
	if _, _, err := db.CreateCheckpoint(context.Background(), skey); err != nil {
		t.Fatal(err)
	}
}

// GetAt at the frontier of the last truncated record (the edge of the
// truncated log, not inside it) gives the state a replay gives (CONTRACT
// §4), although a newer version of the key exists above it: a truncation
// keeps each key's newest version of every segment it removes, not only the
// key's newest version overall.
func TestGetAtTheLogStartAfterTruncation(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{SegmentSize: 4096, InlineValueMax: 64})
	defer db.Close()
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("v1")); err != nil {
		t.Fatal(err)
	}
	fillAnchor(t, db, "a", 200, "x") // several sealed segments
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("v2")); err != nil {
		t.Fatal(err)
	}
	fillAnchor(t, db, "a", 10, "y")
	res, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.RemovedBytes == 0 {
		t.Fatalf("nothing truncated: %s", res.Plan)
	}
	first, err := db.firstPresent("a")
	if err != nil || first <= 2 {
		t.Fatalf("firstPresent = %d, %v", first, err)
	}
	cut := first - 1
	// The frontier {a: cut} is at the cut, not inside the truncated part:
	// GetAt is not refused. It contains the put k=v1 (seq 1) and not k=v2.
	v, err := db.GetAt(ctx, []byte("k"), merge.Frontier{"a": cut})
	if err != nil || string(v.Value) != "v1" {
		t.Fatalf("GetAt(k, {a:%d}) after truncation = %q, %v; a replay of the log gives \"v1\" (SPEC §4)", cut, v.Value, err)
	}
}

// GetAt racing a truncation: the log start it caches must be the index's
// after the truncation, or it would answer inside the truncated log instead
// of refusing with STATE_003. The race is timing-dependent; the test
// retries.
func TestGetAtDuringATruncation(t *testing.T) {
	ctx := context.Background()
	// The race pass looks for data races, which a third of the attempts
	// show as well; the plain pass keeps all of them for the interleavings.
	for attempt := 0; attempt < 60/testutil.RaceStride(3); attempt++ {
		fs := vfs.NewMem()
		db := mustOpen(t, fs, Options{SegmentSize: 4096, InlineValueMax: 64})
		fillAnchor(t, db, "a", 400, "x")
		if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
			t.Fatal(err)
		}
		fillAnchor(t, db, "a", 5, "y")
		// fill-x-0300 gets a newer version above the cut: its version at
		// seq 301 is not the newest and goes with the truncated log.
		if _, err := db.Put(ctx, "a", []byte("fill-x-0300"), []byte("newer")); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				// A reader of the state at some frontier; truncateSegment
				// empties the cache after each segment it removes.
				_, _ = db.GetAt(ctx, []byte("fill-x-0001"), merge.Frontier{"a": 1000})
			}
		}()
		res, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true})
		close(stop)
		<-done
		if err != nil || res.RemovedBytes == 0 {
			t.Fatalf("compact: %v %s", err, res.Plan)
		}
		cached, _ := db.cutOf("a")
		real, _ := db.firstPresent("a")
		if cached != real {
			_, gerr := db.GetAt(ctx, []byte("fill-x-0300"), merge.Frontier{"a": real - 2})
			db.Close()
			t.Fatalf("attempt %d: cut cache says the log starts at %d, the index at %d; GetAt inside the truncated log returns %v instead of STATE_003", attempt, cached, real, gerr)
		}
		db.Close()
	}
}
