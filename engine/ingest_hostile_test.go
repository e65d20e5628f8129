package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A source segment whose next frame declares a body longer than any record
// this database accepts (CONTRACT §9) is refused from the 4-byte length
// alone, not after reading the whole declared frame: up to the format's 528
// MiB, which a sparse file costs the source nothing. The test counts the
// bytes read from the source and the bytes allocated: both must stay far
// below the declared size. A length no record can have (above the format
// maximum) stays INT_001, as verify reports it; one a record may have but
// that is over our limits is INPUT_001, as a whole record over our limits
// is. Nothing of any anchor is joined.
func TestIngestLargeFrameRefusedUnread(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		declared uint32 // the frame's body length; 0: a real record with a 32 MiB value
		code     errs.Code
		says     string
	}{
		{"a real record over our value limit", 0, errs.CodeInvalidInput, "16777216"},
		{"512 MiB declared", 512 << 20, errs.CodeInvalidInput, "16777216"},
		{"1 GiB declared", 1 << 30, errs.CodeHashMismatch, "format maximum"},
		{"4 GiB declared", 0xFFFFFFFE, errs.CodeHashMismatch, "format maximum"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			fs := vfs.Default
			srcDir := fs.PathJoin(root, "src")
			// The source ran with a larger value limit than ours.
			src, err := Open(srcDir, Options{FS: fs, NoSync: true, Limits: segment.Limits{MaxKey: 64 << 10, MaxValue: 64 << 20, MaxIdempotencyKey: 256}})
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range []string{"good", "a"} {
				for _, k := range []string{"k1", "k2"} {
					if _, err := src.Put(ctx, a, []byte(k), []byte("v")); err != nil {
						t.Fatal(err)
					}
				}
			}
			declared := int64(tc.declared)
			if tc.declared == 0 {
				big := bytes.Repeat([]byte("v"), 32<<20)
				if _, err := src.Put(ctx, "a", []byte("big"), big); err != nil {
					t.Fatal(err)
				}
				declared = int64(len(big))
			}
			if err := src.Close(); err != nil {
				t.Fatal(err)
			}
			seg := segmentFileOf(fs, srcDir, "a", 1)
			if tc.declared != 0 {
				// The third frame's length, then a hole as long as the
				// frame it declares: the file holds every byte it claims.
				f, err := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					t.Fatal(err)
				}
				st, _ := f.Stat()
				if _, err := f.Write(binary.BigEndian.AppendUint32(nil, tc.declared)); err != nil {
					t.Fatal(err)
				}
				if err := f.Truncate(st.Size() + 4 + declared + segment.HashSize); err != nil {
					t.Fatal(err)
				}
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
			}

			var read atomic.Int64
			hooked := readHookFS{FS: fs, under: fs.PathJoin(srcDir, segment.AnchorsDir), onRead: func(n int) { read.Add(int64(n)) }}
			dst, err := Open(fs.PathJoin(root, "dst"), Options{FS: hooked})
			if err != nil {
				t.Fatal(err)
			}
			defer dst.Close()
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			rep, err := dst.Ingest(ctx, srcDir, IngestOptions{})
			runtime.ReadMemStats(&after)

			var e *errs.Error
			if !errors.As(err, &e) || e.Code != tc.code || e.Anchor != "a" || e.Seq != 3 || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("ingest: %v, want %s for anchor a seq 3 naming %q", err, tc.code, tc.says)
			}
			if testing.Verbose() {
				t.Log(err)
			}
			if rep.Appended != 0 || len(heldRecords(t, dst)) != 0 {
				t.Fatalf("a refused ingest joined %+v", heldRecords(t, dst))
			}
			// What is read whole is a scan chunk (1 MiB) at a time.
			const bound = 4 << 20
			if n := read.Load(); n > bound {
				t.Fatalf("read %d bytes of the source for a frame declaring %d", n, declared)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > bound {
				t.Fatalf("allocated %d bytes for a frame declaring %d", n, declared)
			}
		})
	}
}

// TestIngestIdempotencyKeysSpill: the idempotency keys of an arriving log
// are checked for reuse in a set that moves to a scratch store past
// ingestIdemInMemory keys (in memory it would grow with the log, and a source's
// log may be any length). A key reused after the move is still found,
// whether its first use was held in memory or in the store; a log without
// reuse is joined; the scratch store is removed either way.
func TestIngestIdempotencyKeysSpill(t *testing.T) {
	defer func(n int) { ingestIdemInMemory = n }(ingestIdemInMemory)
	ingestIdemInMemory = 4
	ctx := context.Background()
	counters := make([]uint64, 20)
	for i := range counters {
		counters[i] = uint64(i + 1)
	}
	for _, tc := range []struct {
		name  string
		reuse int // the index whose key the record at index 15 uses again; -1: none
	}{
		{"no reuse", -1},
		{"first use in memory", 1},
		{"first use in the store", 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			recs := forgedPuts(counters...)
			for i := range recs {
				recs[i].IdempotencyKey = []byte(fmt.Sprintf("idem-%d", i))
			}
			if tc.reuse >= 0 {
				recs[15].IdempotencyKey = recs[tc.reuse].IdempotencyKey
			}
			src := openAt(t, fs, "src")
			if err := src.Close(); err != nil {
				t.Fatal(err)
			}
			forgeAnchor(t, fs, "src", "a", recs)
			var scratch atomic.Int32
			dst := openAt(t, mkdirHookFS{FS: fs, under: "ingest-idem", made: &scratch}, "dst")
			defer dst.Close()
			rep, err := dst.Ingest(ctx, "src", IngestOptions{})
			if scratch.Load() == 0 {
				t.Fatal("20 keys over a bound of 4 made no scratch store")
			}
			if tc.reuse < 0 {
				if err != nil || rep.Appended != 20 {
					t.Fatalf("ingest: %+v %v", rep, err)
				}
			} else {
				var e *errs.Error
				if !errors.As(err, &e) || e.Code != errs.CodeConflict || e.Anchor != "a" || e.Seq != 16 {
					t.Fatalf("ingest: %v, want STATE_002 for anchor a seq 16", err)
				}
				if held := heldRecords(t, dst); len(held) != 0 {
					t.Fatalf("a refused ingest joined %v", held)
				}
			}
			if left, _ := fs.List(fs.PathJoin("dst", "tmp")); len(left) != 0 {
				t.Fatalf("the scratch store is left behind: %v", left)
			}
		})
	}
}

// mkdirHookFS counts the directories made whose path holds under.
type mkdirHookFS struct {
	vfs.FS
	under string
	made  *atomic.Int32
}

func (f mkdirHookFS) MkdirAll(dir string, perm os.FileMode) error {
	if strings.Contains(dir, f.under) {
		f.made.Add(1)
	}
	return f.FS.MkdirAll(dir, perm)
}

// TestIngestHeldRecordOverLoweredLimits: a record we hold that is over our
// limits — taken when they were larger — may arrive again in the log we
// ingest, at the same seq. Refusing every source frame over our limits
// would refuse that log, which before took only its new records: the frame
// is read when it is no longer than ours at that seq. A new record over our
// limits is still refused.
func TestIngestHeldRecordOverLoweredLimits(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	big := Options{FS: fs, SegmentSize: 64 << 20, Limits: segment.Limits{MaxKey: 64 << 10, MaxValue: 4 << 20, MaxIdempotencyKey: 256}}
	small := big
	small.Limits.MaxValue = 1 << 20
	src, err := Open("src", big)
	if err != nil {
		t.Fatal(err)
	}
	put := func(db *DB, k string, n int) {
		t.Helper()
		if _, err := db.Put(ctx, "a", []byte(k), bytes.Repeat([]byte("v"), n)); err != nil {
			t.Fatal(err)
		}
	}
	put(src, "k1", 1)
	put(src, "big", 2<<20)
	put(src, "k2", 1)
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	dst, err := Open("dst", big)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := dst.Ingest(ctx, "src", IngestOptions{}); err != nil || rep.Appended != 3 {
		t.Fatalf("first ingest: %+v %v", rep, err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	if src, err = Open("src", big); err != nil {
		t.Fatal(err)
	}
	put(src, "k3", 1)
	put(src, "k4", 1)
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if dst, err = Open("dst", small); err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if rep, err := dst.Ingest(ctx, "src", IngestOptions{}); err != nil || rep.Appended != 2 {
		t.Fatalf("ingest of a log holding our record over our lowered limits: %+v %v", rep, err)
	}
	// A new record over our limits is refused.
	if src, err = Open("src", big); err != nil {
		t.Fatal(err)
	}
	put(src, "big2", 2<<20)
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = dst.Ingest(ctx, "src", IngestOptions{})
	var e *errs.Error
	if !errors.As(err, &e) || e.Code != errs.CodeInvalidInput || e.Seq != 6 {
		t.Fatalf("ingest of a new record over our limits: %v, want INPUT_001 at seq 6", err)
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

// An arriving log whose counters do not increase is broken (verify calls it
// INT_002). Its hashes and links all check, so only a counter check finds
// it. The ingest refuses it before anything is joined: no other anchor of
// the same ingest, and no batch of the broken one (CONTRACT §10 ingest;
// DESIGN §10: the whole log is verified before anything is joined).
func TestIngestRefusesNonIncreasingCountersWhole(t *testing.T) {
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
func TestIngestOfALateBadCounterJoinsNothing(t *testing.T) {
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
func TestIngestContinuationCounterAboveOurs(t *testing.T) {
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

// An idempotency key is used once per anchor (CONTRACT §7): an arriving log
// that uses one twice, or uses one our log already holds, is refused before
// anything is joined.
func TestIngestOfAReusedIdempotencyKeyJoinsNothing(t *testing.T) {
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
func TestIngestAnchorNamedTwice(t *testing.T) {
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
func TestIngestContinuationReusingOurIdempotencyKey(t *testing.T) {
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
