package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// After a rebuild from a snapshot, one located 'k' row above the rebuilt
// frontier altered: the anchor's keyed sums differ, and its rows are matched
// one by one to name the bad one. The rows expected then were every
// record's, those below mhistory_from too, which the rebuild never wrote:
// verify named each healthy record below the frontier as lacking its 'k'
// row (INT_004, 133 false findings for a1), beside the one real one.
func TestReview2VerifyTamperedRowAboveHistoryFrom(t *testing.T) {
	db, _ := deferredFixture(t)
	hf := db.histFrom["a1"]
	if hf == 0 {
		t.Fatal("no rebuilt frontier for a1")
	}
	it, err := db.index.NewIter(&pebble.IterOptions{LowerBound: []byte{tagKey}, UpperBound: []byte{tagKey + 1}})
	if err != nil {
		t.Fatal(err)
	}
	var k []byte
	var ve versionEntry
	for it.First(); it.Valid(); it.Next() {
		if versionKind(it.Value()) != versionLocated {
			continue
		}
		if _, _, a, err := parseVersionKey(it.Key()); err == nil && a == "a1" {
			k = append([]byte(nil), it.Key()...)
			ve, _ = decodeVersionEntry(it.Value())
			break
		}
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if k == nil || ve.Seq <= hf {
		t.Fatalf("no located row of a1 above its rebuilt frontier %d", hf)
	}
	ve.Hash[0] ^= 1
	setRow(t, db, k, ve.encode(nil))
	rep := wantFinding(t, db, errs.CodeIndexMismatch, "a1", ve.Seq, "")
	for _, f := range rep.Failures {
		if f.Seq != ve.Seq {
			t.Errorf("a finding about a record the row does not name: %s %s seq %d: %s", f.Code, f.Anchor, f.Seq, f.Message)
		}
	}
}

// CreateCheckpoint racing Close: it checks that the database is open, then
// reads the index (the anchors, the trees) and, since it signs only durable
// records, settles (Sync). Close closes the index once nothing it waits for
// is in flight, and nothing held it off: a CreateCheckpoint that passed the
// check read the closed index, and Pebble panics ("pebble: closed"),
// taking the process down instead of answering IO_001 "database is closed"
// (or signing). Here it waits on checkpointMu, which the test holds, while
// Close runs.
func TestReview2CheckpointRacingClose(t *testing.T) {
	ctx := context.Background()
	skey, _ := coverKeys(t)
	fs := vfs.NewMem()
	db, err := Open("db", Options{FS: fs, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	checkpointMu.Lock()
	done := make(chan string, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Sprint("panic: ", r)
			}
		}()
		_, _, err := db.CreateCheckpoint(ctx, skey)
		if err != nil && !errors.Is(err, ErrWriteFailed) {
			done <- fmt.Sprint("error: ", err)
			return
		}
		done <- ""
	}()
	time.Sleep(50 * time.Millisecond) // it waits on checkpointMu
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	select {
	case err := <-closed:
		closed <- err
	case <-time.After(200 * time.Millisecond): // Close waits for it
	}
	checkpointMu.Unlock()
	if s := <-done; s != "" {
		t.Fatalf("CreateCheckpoint racing Close: %s", s)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

// A stub written before stop 18 kept only the versions that were their
// key's newest overall, not each key's last in its segment (FORMAT §6.9:
// such stubs "read the same way"). Here B's delete of K, superseded by a
// later put on A, went with B's first segment. A rebuild from a snapshot
// taken before that put indexes, below its frontier, no row for K: the
// state there has K deleted (Get and GetAt are right). The history check
// took A's older put of K, the last version it knew inside the frontier,
// for the state, and reported a freshly rebuilt index as corrupt (INT_004
// "no 'k' row for key K at the rebuilt frontier"). It is still reported
// when no stub could have dropped a later version: a deleted row of a key
// with no version beyond the frontier, or newer than every stub.
func TestReview2VerifyHistoryFromPreStop18Stub(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	opts := fixtureOptions(fs)
	db, err := Open("db", opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "A", []byte("K"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Delete(ctx, "B", []byte("K")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 80; i++ {
		if _, err := db.Put(ctx, "B", []byte(fmt.Sprintf("f%03d", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.CreateSnapshot(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "A", []byte("K"), []byte("y")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.truncateSegment(ctx, "B", 1); err != nil {
		t.Fatal(err)
	}
	a, err := db.getAnchor("B", false)
	if err != nil {
		t.Fatal(err)
	}
	stubPath := fs.PathJoin(a.dir, segment.StubFileName(1))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The stub as code before stop 18 wrote it: without K's delete.
	data, err := readWholeFile(fs, stubPath)
	if err != nil {
		t.Fatal(err)
	}
	st, err := segment.ParseStub(data)
	if err != nil {
		t.Fatal(err)
	}
	var kept []segment.Record
	for _, r := range st.Kept {
		if string(r.Key) != "K" {
			kept = append(kept, r)
		}
	}
	if len(kept) != len(st.Kept)-1 {
		t.Fatal("the stub did not keep K's delete")
	}
	st.Kept = kept
	f, err := fs.Create(stubPath, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(segment.AppendStub(nil, &st)); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		t.Fatal(err)
	}
	if kinds := rebuildFromSnapshot(t, opts); !kinds[EventStateFromSnapshot] {
		t.Fatalf("the rebuild did not start from the snapshot: %v", kinds)
	}
	db = mustOpen(t, fs, opts)
	t.Cleanup(func() { _ = db.Close() })
	if v, err := db.Get(ctx, []byte("K")); err != nil || string(v.Value) != "y" {
		t.Fatalf("Get(K) = %q, %v", v.Value, err)
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("a rebuilt index over a stub of before stop 18: %v %+v", err, rep.Failures)
	}
	// f000 is kept by the stub, f079 in a segment; neither has a version
	// beyond the frontier.
	for _, k := range []string{"f000", "f079"} {
		var vs []Version
		for v, err := range db.Versions(ctx, []byte(k)) {
			if err != nil {
				t.Fatal(err)
			}
			vs = append(vs, v)
		}
		if len(vs) != 1 {
			t.Fatalf("%d versions of %s, want 1", len(vs), k)
		}
		seq := vs[0].Seq
		setRow(t, db, versionKey([]byte(k), vs[0].Counter, vs[0].Anchor), nil)
		wantFinding(t, db, errs.CodeIndexMismatch, "B", seq, "at the rebuilt frontier")
	}
}
