package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// forgeAnchor writes the anchor's log in the database directory dir as one
// unsealed segment holding recs, chained and hashed as a writer would: every
// hash and link verifies, whatever the records say. It replaces the anchor's
// segments. This is what a hostile (or broken) source can hand to Ingest: no
// key is needed to produce a log whose hashes check.
func forgeAnchor(t *testing.T, fs vfs.FS, dir, anchor string, recs []segment.Record) {
	t.Helper()
	d := segmentAnchorDir(fs, dir, anchor)
	if err := fs.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	names, _ := fs.List(d)
	for _, n := range names {
		if _, ok := segment.ParseFileName(n); ok {
			if err := fs.Remove(fs.PathJoin(d, n)); err != nil {
				t.Fatal(err)
			}
		}
	}
	h := segment.Header{Anchor: anchor, Segno: 1, FirstSeq: 1, PrevHash: segment.GenesisHash(anchor)}
	buf := segment.AppendHeader(nil, &h)
	prev := h.PrevHash
	for i := range recs {
		r := recs[i]
		r.Anchor, r.Seq, r.PrevHash = anchor, uint64(i+1), prev
		buf = segment.AppendFrame(buf, &r)
		prev = r.Hash
	}
	f, err := fs.Create(fs.PathJoin(d, segment.FileName(1)), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(buf); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// forgeContinuation writes, as the anchor's only segment in dir (segno 2),
// a log that starts after seq 1 with rec — what a source whose older
// segments compaction truncated holds — linked to prev.
func forgeContinuation(t *testing.T, fs vfs.FS, dir string, prev segment.Hash, rec segment.Record) {
	t.Helper()
	d := segmentAnchorDir(fs, dir, rec.Anchor)
	if err := fs.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	h := segment.Header{Anchor: rec.Anchor, Segno: 2, FirstSeq: rec.Seq, PrevHash: prev}
	buf := segment.AppendHeader(nil, &h)
	rec.PrevHash = prev
	buf = segment.AppendFrame(buf, &rec)
	f, err := fs.Create(fs.PathJoin(d, segment.FileName(2)), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(buf); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// forgedPuts returns n put records with the given counters (seq, links and
// hashes are set by forgeAnchor).
func forgedPuts(counters ...uint64) []segment.Record {
	recs := make([]segment.Record, len(counters))
	for i, c := range counters {
		recs[i] = segment.Record{Counter: c, Time: int64(i + 1), Type: segment.TypePut,
			Key: []byte(fmt.Sprintf("f%d", i)), Value: []byte("forged")}
	}
	return recs
}

// heldRecords sums the records of every anchor of db.
func heldRecords(t *testing.T, db *DB) map[string]uint64 {
	t.Helper()
	m := map[string]uint64{}
	for info, err := range db.Anchors(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		m[info.ID] = info.Records
	}
	return m
}

// An arriving log whose counters do not increase is broken (verify calls it
// INT_002). Its hashes and links all check, so only a counter check finds it.
// The ingest must refuse it before anything is joined: no other anchor of the
// same ingest, and no batch of the broken one (SPEC §10 ingest; DESIGN §10:
// the whole log is verified before anything is joined).
func TestReviewIngestNonIncreasingCountersRefusedWhole(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		counters []uint64
	}{
		{"repeat", []uint64{5, 6, 6}},
		{"decrease", []uint64{5, 9, 7}},
		{"zero", []uint64{0, 1, 2}},
		{"past MaxCounter", []uint64{1, 2, MaxCounter + 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			src := openAt(t, fs, "src")
			writeSome(t, src, []string{"good"}, 10, "src")
			if err := src.Close(); err != nil {
				t.Fatal(err)
			}
			forgeAnchor(t, fs, "src", "bad", forgedPuts(tc.counters...))
			dst := openAt(t, fs, "dst")
			defer dst.Close()
			_, err := dst.Ingest(ctx, "src", IngestOptions{Anchors: []string{"good", "bad"}})
			if errs.CodeOf(err) != errs.CodeChainBroken {
				t.Errorf("ingest of a log with counters %v: %v, want INT_002", tc.counters, err)
			}
			if held := heldRecords(t, dst); len(held) != 0 {
				t.Fatalf("a refused ingest joined %v", held)
			}
		})
	}
}

// The same when the broken counter comes after a first batch of the anchor
// (batches are 1,024 records): nothing of the anchor is joined.
func TestReviewIngestLateBadCounterJoinsNothing(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	src := openAt(t, fs, "src")
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	counters := make([]uint64, 1500)
	for i := range counters {
		counters[i] = uint64(i + 1)
	}
	counters[1400] = 3
	forgeAnchor(t, fs, "src", "bad", forgedPuts(counters...))
	dst := openAt(t, fs, "dst")
	defer dst.Close()
	_, err := dst.Ingest(ctx, "src", IngestOptions{})
	if errs.CodeOf(err) != errs.CodeChainBroken {
		t.Errorf("ingest: %v, want INT_002", err)
	}
	if held := heldRecords(t, dst); len(held) != 0 {
		t.Fatalf("a refused ingest joined %v", held)
	}
}

// A continuation of a truncated source log (its first segment starts after
// seq 1) must still carry counters above ours: only the link to our head is
// checked against our log, so its counters must be checked too.
func TestReviewIngestContinuationCounterAboveOurs(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	dst := openAt(t, fs, "dst")
	defer dst.Close()
	var head Receipt
	for i := 0; i < 3; i++ {
		r, err := dst.Append(ctx, Entry{Anchor: "x", Type: "put", Key: []byte("k"), Value: []byte("v"), Counter: uint64(100 + i)})
		if err != nil {
			t.Fatal(err)
		}
		head = r
	}
	src := openAt(t, fs, "src")
	writeSome(t, src, []string{"good"}, 3, "src")
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	// The source holds x from seq 4 on (its older segments compacted away),
	// linked to our head, with a counter below our head's.
	forgeContinuation(t, fs, "src", head.Hash, segment.Record{Anchor: "x", Seq: 4, Counter: 50, Time: 1,
		Type: segment.TypePut, Key: []byte("k"), Value: []byte("old")})
	_, err := dst.Ingest(ctx, "src", IngestOptions{Anchors: []string{"good", "x"}})
	if errs.CodeOf(err) != errs.CodeChainBroken {
		t.Errorf("ingest: %v, want INT_002", err)
	}
	if held := heldRecords(t, dst); held["good"] != 0 || held["x"] != 3 {
		t.Fatalf("a refused ingest joined: %v", held)
	}
}

// An idempotency key is used once per anchor (SPEC §7): an arriving log that
// uses one twice, or uses one our log already holds, is refused before
// anything is joined.
func TestReviewIngestReusedIdempotencyKeyJoinsNothing(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	src := openAt(t, fs, "src")
	writeSome(t, src, []string{"good"}, 10, "src")
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	recs := forgedPuts(1, 2, 3)
	recs[0].IdempotencyKey = []byte("once")
	recs[2].IdempotencyKey = []byte("once")
	forgeAnchor(t, fs, "src", "bad", recs)
	dst := openAt(t, fs, "dst")
	defer dst.Close()
	_, err := dst.Ingest(ctx, "src", IngestOptions{Anchors: []string{"good", "bad"}})
	if err == nil {
		t.Fatal("a log that uses an idempotency key twice was joined")
	}
	if held := heldRecords(t, dst); len(held) != 0 {
		t.Fatalf("a refused ingest joined %v (%v)", held, err)
	}
}

// Naming an anchor twice (`ingest --anchor a --anchor a`) ingests it once.
func TestReviewIngestAnchorNamedTwice(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	src := openAt(t, fs, "src")
	writeSome(t, src, []string{"a"}, 10, "src")
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	dst := openAt(t, fs, "dst")
	defer dst.Close()
	rep, err := dst.Ingest(ctx, "src", IngestOptions{Anchors: []string{"a", "a"}})
	if err != nil || rep.Appended != 10 {
		t.Fatalf("ingest of an anchor named twice: %+v %v", rep, err)
	}
	if held := heldRecords(t, dst); held["a"] != 10 {
		t.Fatalf("held %v", held)
	}
}

// A continuation (here of a truncated source log, which links to our head)
// that reuses an idempotency key our part of the log holds is refused before
// anything is joined.
func TestReviewIngestContinuationReusesOurIdempotencyKey(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	dst := openAt(t, fs, "dst")
	defer dst.Close()
	var head Receipt
	for i := 0; i < 3; i++ {
		e := Entry{Anchor: "x", Type: "put", Key: []byte("k"), Value: []byte(fmt.Sprint(i))}
		if i == 1 {
			e.IdempotencyKey = []byte("once")
		}
		r, err := dst.Append(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		head = r
	}
	src := openAt(t, fs, "src")
	writeSome(t, src, []string{"good"}, 3, "src")
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	forgeContinuation(t, fs, "src", head.Hash, segment.Record{Anchor: "x", Seq: 4, Counter: head.Counter + 1, Time: 1,
		Type: segment.TypePut, Key: []byte("k"), Value: []byte("again"), IdempotencyKey: []byte("once")})
	_, err := dst.Ingest(ctx, "src", IngestOptions{Anchors: []string{"good", "x"}})
	if errs.CodeOf(err) != errs.CodeConflict {
		t.Errorf("ingest: %v, want STATE_002", err)
	}
	if held := heldRecords(t, dst); held["good"] != 0 || held["x"] != 3 {
		t.Fatalf("a refused ingest joined: %v", held)
	}
}
