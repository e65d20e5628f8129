package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

func openAt(t *testing.T, fs vfs.FS, dir string) *DB {
	t.Helper()
	db, err := Open(dir, Options{FS: fs, SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func writeSome(t *testing.T, db *DB, anchors []string, n int, tag string) {
	t.Helper()
	for i := 0; i < n; i++ {
		a := anchors[i%len(anchors)]
		if _, err := db.Put(context.Background(), a, []byte(fmt.Sprintf("k%d", i%13)), []byte(fmt.Sprintf("%s-%d", tag, i))); err != nil {
			t.Fatal(err)
		}
	}
}

func stateOf(t *testing.T, db *DB) map[string]string {
	t.Helper()
	m := map[string]string{}
	for v, err := range db.Scan(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		m[string(v.Key)] = string(v.Value)
	}
	return m
}

// TestPartitionStory: two databases write independently, each ingests the
// other's anchors, and both reach the same merged root and state.
func TestPartitionStory(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	east := openAt(t, fs, "east")
	west := openAt(t, fs, "west")
	writeSome(t, east, []string{"e1", "e2"}, 150, "east")
	writeSome(t, west, []string{"w1", "w2", "w3"}, 120, "west")
	// A shared anchor written on one side first, then extended on the other
	// after a first exchange.
	writeSome(t, east, []string{"shared"}, 10, "east-shared")
	if err := east.Close(); err != nil {
		t.Fatal(err)
	}
	// A source must be closed: it is read straight from its files.
	if _, err := west.Ingest(ctx, "east", IngestOptions{Anchors: []string{"shared"}}); err != nil {
		t.Fatalf("first exchange: %v", err)
	}
	writeSome(t, west, []string{"shared"}, 5, "west-shared")
	if err := west.Close(); err != nil {
		t.Fatal(err)
	}
	east = openAt(t, fs, "east")
	rep, err := east.Ingest(ctx, "west", IngestOptions{})
	if err != nil {
		t.Fatalf("east ingests west: %v", err)
	}
	if rep.Appended != 120+5 {
		t.Fatalf("east appended %d records, want 125: %+v", rep.Appended, rep)
	}
	if err := east.Close(); err != nil {
		t.Fatal(err)
	}
	west = openAt(t, fs, "west")
	defer west.Close()
	if _, err := west.Ingest(ctx, "east", IngestOptions{}); err != nil {
		t.Fatalf("west ingests east: %v", err)
	}
	east = openAt(t, fs, "east")
	defer east.Close()
	re, ne, err := east.MergedRoot(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	rw, nw, err := west.MergedRoot(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if re != rw || ne != nw || ne != 150+120+10+5 {
		t.Fatalf("merged roots differ: east %s (%d), west %s (%d)", re, ne, rw, nw)
	}
	se, sw := stateOf(t, east), stateOf(t, west)
	if fmt.Sprint(se) != fmt.Sprint(sw) {
		t.Fatalf("states differ:\n%v\n%v", se, sw)
	}
	checkDB(t, east, nil)
	checkDB(t, west, nil)
	// The clock moved past what arrived: a local write sorts last.
	r, err := west.Put(ctx, "w1", []byte("k0"), []byte("after"))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := west.Get(ctx, []byte("k0")); v.Seq != r.Seq || v.Anchor != "w1" {
		t.Fatalf("a local write after ingest does not win: %+v", v)
	}
}

func TestIngestRefusesForksAndForgeries(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	a := openAt(t, fs, "a")
	b := openAt(t, fs, "b")
	writeSome(t, a, []string{"x"}, 20, "a")
	writeSome(t, a, []string{"y"}, 5, "a")
	writeSome(t, b, []string{"x"}, 20, "b") // the same anchor, other records: a fork
	_ = a.Close()
	before := stateOf(t, b)
	_, err := b.Ingest(ctx, "a", IngestOptions{})
	var fe *ForkError
	if !errors.As(err, &fe) || !errors.Is(err, ErrConflict) || fe.Anchor != "x" || fe.OurHead.Seq != 20 || fe.TheirSeq != 20 {
		t.Fatalf("fork: %v", err)
	}
	if info, ok, _ := b.AnchorInfo(context.Background(), "y"); ok || info.Records != 0 {
		t.Fatalf("a refused ingest joined anchor y anyway")
	}
	if fmt.Sprint(stateOf(t, b)) != fmt.Sprint(before) {
		t.Fatal("a refused ingest changed the state")
	}
	// A forged record in the source (one byte of a value) refuses the ingest.
	a = openAt(t, fs, "a")
	writeSome(t, a, []string{"z"}, 3, "a")
	_ = a.Close()
	f, _ := fs.UnsafeGetFileDataBuffer(segmentFileOf(fs, "a", "z", 1))
	f[len(f)-40] ^= 1
	if _, err := b.Ingest(ctx, "a", IngestOptions{Anchors: []string{"z"}}); !IsCorruption(err) {
		t.Fatalf("forged source: %v, want INT_*", err)
	}
	if _, ok, _ := b.AnchorInfo(context.Background(), "z"); ok {
		t.Fatal("a forged anchor was joined")
	}
	f[len(f)-40] ^= 1
	rep, err := b.Ingest(ctx, "a", IngestOptions{Anchors: []string{"z", "y"}})
	if err != nil || rep.Appended != 8 {
		t.Fatalf("ingest of the repaired source: %+v %v", rep, err)
	}
	// A second ingest of the same logs is a no-op.
	rep, err = b.Ingest(ctx, "a", IngestOptions{Anchors: []string{"z", "y"}})
	if err != nil || rep.Appended != 0 {
		t.Fatalf("repeat ingest: %+v %v", rep, err)
	}
	// The source database is locked while it is open.
	a = openAt(t, fs, "a")
	if _, err := b.Ingest(ctx, "a", IngestOptions{}); !errors.Is(err, ErrScopeLocked) {
		t.Fatalf("ingest from an open database: %v, want STATE_001", err)
	}
	_ = a.Close()
	_ = b.Close()
}

func segmentFileOf(fs vfs.FS, dir, anchor string, segno uint64) string {
	return fs.PathJoin(segmentAnchorDir(fs, dir, anchor), segmentFileName(segno))
}

// An ingest source must be an anchordb database. A directory that is not one
// is refused as bad input and left as it was: the lock file must not be
// created in someone else's directory (found by a CLI audit: `ingest --from
// /tmp` reported success and left /tmp/LOCK behind).
func TestIngestRefusesANonDatabase(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := openAt(t, fs, "db")
	defer db.Close()
	for _, from := range []string{"empty", "missing"} {
		if from == "empty" {
			if err := fs.MkdirAll(from, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		_, err := db.Ingest(ctx, from, IngestOptions{})
		if errs.CodeOf(err) != errs.CodeInvalidInput {
			t.Fatalf("ingest from %s: %v, want INPUT_001", from, err)
		}
		names, _ := fs.List(from)
		if len(names) != 0 {
			t.Fatalf("ingest from %s left %v behind", from, names)
		}
	}
	if _, err := db.Ingest(ctx, "db", IngestOptions{}); err == nil {
		t.Fatal("ingest from the database itself was accepted")
	}
}

// TestIngestStoppedSaysWhatItJoined: an ingest stopped between batches
// keeps what it appended, and its report counts all of it, the stopped
// anchor's part included, and the CLI prints the report.
func TestIngestStoppedSaysWhatItJoined(t *testing.T) {
	fs := vfs.NewMem()
	src := openAt(t, fs, "src")
	writeSome(t, src, []string{"a1", "a2"}, 5000, "src")
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	dst := openAt(t, fs, "dst")
	defer dst.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rep, err := dst.Ingest(ctx, "src", IngestOptions{Progress: func(done, total uint64) {
		if done > total/2 {
			cancel() // inside the second anchor, after one of its batches
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want the cancellation", err)
	}
	var held uint64
	for info, err := range dst.Anchors(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		held += info.Records
	}
	if held == 0 || held == 5000 || rep.Appended != held {
		t.Fatalf("the report says %d appended, the database holds %d of 5000", rep.Appended, held)
	}
	if want := fmt.Sprintf("%d appended in all", held); !strings.Contains(err.Error(), want) {
		t.Fatalf("the error does not say %q: %v", want, err)
	}
}

// TestIngestRefusesRecordsOverOurLimits: a source that ran with larger
// limits cannot bring in a key, value or idempotency key this database
// would refuse from a caller; the refusal comes before anything of any
// anchor is joined.
func TestIngestRefusesRecordsOverOurLimits(t *testing.T) {
	ctx := context.Background()
	big := segment.Limits{MaxKey: 1 << 10, MaxValue: 1 << 16, MaxIdempotencyKey: 512}
	small := segment.Limits{MaxKey: 64, MaxValue: 1 << 10, MaxIdempotencyKey: 32}
	for _, tc := range []struct {
		name            string
		key, value, idk []byte
		limit           string
	}{
		{"key", bytes.Repeat([]byte("k"), 65), []byte("v"), nil, "limit 64"},
		{"value", []byte("k"), bytes.Repeat([]byte("v"), 1<<10+1), nil, "limit 1024"},
		{"idempotency key", []byte("k"), []byte("v"), bytes.Repeat([]byte("i"), 33), "limit 32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			src, err := Open("src", Options{FS: fs, Limits: big})
			if err != nil {
				t.Fatal(err)
			}
			// A good anchor first: the refusal must leave it out too.
			if _, err := src.Put(ctx, "good", []byte("a"), []byte("1")); err != nil {
				t.Fatal(err)
			}
			if _, err := src.Put(ctx, "over", []byte("fine"), []byte("1")); err != nil {
				t.Fatal(err)
			}
			if _, err := src.Append(ctx, Entry{Anchor: "over", Type: segment.TypePut, Key: tc.key, Value: tc.value, IdempotencyKey: tc.idk}); err != nil {
				t.Fatal(err)
			}
			if err := src.Close(); err != nil {
				t.Fatal(err)
			}
			dst, err := Open("dst", Options{FS: fs, Limits: small})
			if err != nil {
				t.Fatal(err)
			}
			defer dst.Close()
			_, err = dst.Ingest(ctx, "src", IngestOptions{})
			var e *errs.Error
			if errs.CodeOf(err) != errs.CodeInvalidInput || !errors.As(err, &e) || e.Anchor != "over" || e.Seq != 2 ||
				!strings.Contains(err.Error(), tc.limit) {
				t.Fatalf("ingest: %v, want INPUT_001 for anchor over at seq 2 naming %q", err, tc.limit)
			}
			if testing.Verbose() {
				t.Log(err)
			}
			for info, err := range dst.Anchors(ctx) {
				if err != nil {
					t.Fatal(err)
				}
				t.Fatalf("a refused ingest joined anchor %q", info.ID)
			}
		})
	}
}

// TestIngestCounterBound: an arriving counter above MaxIngestCounter is
// refused with INPUT_001 before anything is joined (it would exhaust our
// Lamport clock); one at the bound is joined, and default-counter appends
// go on after it on every anchor.
func TestIngestCounterBound(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	src := openAt(t, fs, "src")
	writeSome(t, src, []string{"good"}, 3, "src")
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	forgeAnchor(t, fs, "src", "high", forgedPuts(1, MaxIngestCounter+1))
	dst := openAt(t, fs, "dst")
	defer dst.Close()
	_, err := dst.Ingest(ctx, "src", IngestOptions{})
	if errs.CodeOf(err) != errs.CodeInvalidInput || !strings.Contains(err.Error(), strconv.FormatUint(MaxIngestCounter, 10)) {
		t.Fatalf("ingest of counter MaxIngestCounter+1: %v, want INPUT_001 naming the bound", err)
	}
	if held := heldRecords(t, dst); len(held) != 0 {
		t.Fatalf("a refused ingest joined %v", held)
	}

	forgeAnchor(t, fs, "src", "high", forgedPuts(1, MaxIngestCounter))
	if _, err := dst.Ingest(ctx, "src", IngestOptions{}); err != nil {
		t.Fatalf("ingest of counter MaxIngestCounter: %v", err)
	}
	for i, anchor := range []string{"good", "high", "new"} {
		r, err := dst.Put(ctx, anchor, []byte("k"), []byte("v"))
		if want := MaxIngestCounter + 1 + uint64(i); err != nil || r.Counter != want {
			t.Fatalf("default counter on %q after the ingest: %+v %v, want counter %d", anchor, r, err, want)
		}
	}
}

// While an ingest holds an anchor, local appends to it are refused
// (STATE_001) because they would move its head. A retry of an append the
// anchor already holds moves nothing: it is answered with the original
// receipt, Duplicate set (CONTRACT §7), on every path, also when it reaches
// the commit leader (with admission off always, and otherwise whenever some
// unrelated NoSync write has left the journal unsynced). The answer to the
// same retry does not depend on other anchors' traffic.
func TestRetryOfCommittedAppendDuringIngestIsDuplicate(t *testing.T) {
	for _, disable := range []bool{false, true} {
		name := "admission"
		if disable {
			name = "admission-off"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			fs := vfs.NewMem()
			open := func(dir string) *DB {
				t.Helper()
				db, err := Open(dir, Options{FS: fs, DisableAdmission: disable})
				if err != nil {
					t.Fatal(err)
				}
				return db
			}
			orig := Entry{Anchor: "a", Type: "put", Key: []byte("x"), Value: []byte("v"), IdempotencyKey: []byte("k1")}
			src := open("src")
			first, err := src.Append(ctx, orig)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := src.Put(ctx, "b", []byte("b1"), []byte("v")); err != nil {
				t.Fatal(err)
			}
			if err := src.Close(); err != nil {
				t.Fatal(err)
			}
			dst := open("dst")
			defer dst.Close()
			if _, err := dst.Ingest(ctx, "src", IngestOptions{}); err != nil {
				t.Fatal(err)
			}
			src = open("src")
			for _, k := range []string{"b2", "b3"} {
				if _, err := src.Put(ctx, "b", []byte(k), []byte("v")); err != nil {
					t.Fatal(err)
				}
			}
			if err := src.Close(); err != nil {
				t.Fatal(err)
			}

			var retry Receipt
			var retryErr error
			calls := 0
			_, err = dst.Ingest(ctx, "src", IngestOptions{Progress: func(done, total uint64) {
				if calls++; calls > 1 {
					return
				}
				// Another anchor's NoSync write leaves the journal unsynced.
				if _, err := dst.Put(ctx, "c", []byte("c"), []byte("v"), WithNoSync(true)); err != nil {
					t.Errorf("NoSync put to an anchor not ingested: %v", err)
				}
				retry, retryErr = dst.Append(ctx, orig)
			}})
			if err != nil {
				t.Fatal(err)
			}
			if calls == 0 {
				t.Fatal("the progress callback never ran")
			}
			if retryErr != nil {
				t.Fatalf("retry of an append anchor %q holds, during an ingest of it: %v; want its original receipt (SPEC §7)", "a", retryErr)
			}
			if !retry.Duplicate || retry.Seq != first.Seq || retry.Hash != first.Hash {
				t.Fatalf("retry: %+v, want the original %+v as a duplicate", retry, first)
			}
		})
	}
}
