package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// CONTRACT §3: damage in the middle of a log makes the anchor read-only until an
// operator acts. A clean Open reads no segment, so damage done while the
// database was closed is first seen by a read or by Verify; from then on,
// and across reopens, the anchor takes no append, while other anchors do.

// damagedMidLog writes three records to anchor "t" and one to "u", closes,
// and flips a byte of the second record's value in t's segment.
func damagedMidLog(t *testing.T) vfs.FS {
	t.Helper()
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{})
	for _, kv := range [][2]string{{"k1", "value-one"}, {"k2", "value-two"}, {"k3", "value-three"}} {
		if _, err := db.Put(ctx, "t", []byte(kv[0]), []byte(kv[1])); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Put(ctx, "u", []byte("other"), []byte("fine")); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	path := fs.PathJoin(segmentAnchorDir(fs, "db", "t"), segmentFileName(1))
	f, err := fs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(data, []byte("value-two"))
	if at < 0 {
		t.Fatal("value not found in the segment")
	}
	data[at+3] ^= 0x20
	w, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(w.Sync(), w.Close()); err != nil {
		t.Fatal(err)
	}
	return fs
}

// wantReadOnly checks that appends to t are refused with the damage's code
// and that u still takes them.
func wantReadOnly(t *testing.T, db *DB, when string) {
	t.Helper()
	ctx := context.Background()
	_, err := db.Put(ctx, "t", []byte("k4"), []byte("v4"))
	if c := errs.CodeOf(err); c != errs.CodeHashMismatch {
		t.Fatalf("%s: append to the damaged anchor: %v (code %q), want INT_001", when, err, c)
	}
	if _, err := db.Put(ctx, "u", []byte("more"), []byte("fine")); err != nil {
		t.Fatalf("%s: append to an undamaged anchor: %v", when, err)
	}
}

func TestDamageFoundByReadMakesAnchorReadOnly(t *testing.T) {
	ctx := context.Background()
	fs := damagedMidLog(t)
	db := mustOpen(t, fs, Options{})
	if _, err := db.Record(ctx, "t", 2); errs.CodeOf(err) != errs.CodeHashMismatch {
		t.Fatalf("read of the damaged record: %v", err)
	}
	wantReadOnly(t, db, "after the read")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = mustOpen(t, fs, Options{})
	defer db.Close()
	wantReadOnly(t, db, "after reopening")
	if !reportsDamage(db, "t") {
		t.Fatalf("open did not report the damage it holds: %+v", db.RecoveryReport())
	}
}

func TestDamageFoundByVerifyMakesAnchorReadOnly(t *testing.T) {
	ctx := context.Background()
	fs := damagedMidLog(t)
	db := mustOpen(t, fs, Options{})
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || len(rep.Failures) == 0 || rep.Failures[0].Anchor != "t" {
		t.Fatalf("verify: %+v", rep)
	}
	wantReadOnly(t, db, "after verify")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = mustOpen(t, fs, Options{})
	wantReadOnly(t, db, "after reopening")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// What an operator does (docs/RELIABILITY.md): put the byte back, then
	// rebuild the index. The rebuild checks every record again.
	path := fs.PathJoin(segmentAnchorDir(fs, "db", "t"), segmentFileName(1))
	f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(f)
	at := bytes.Index(data, []byte("valUe-two"))
	if at < 0 {
		t.Fatal("flipped value not found")
	}
	if _, err := f.WriteAt([]byte("u"), int64(at+3)); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		t.Fatal(err)
	}
	if _, err := RebuildIndex(ctx, "db", Options{FS: fs}, true); err != nil {
		t.Fatal(err)
	}
	db = mustOpen(t, fs, Options{})
	defer db.Close()
	if _, err := db.Put(ctx, "t", []byte("k4"), []byte("v4")); err != nil {
		t.Fatalf("append after the operator's repair: %v", err)
	}
}

func reportsDamage(db *DB, anchor string) bool {
	for _, ev := range db.RecoveryReport().Events {
		if ev.Kind == EventDamaged && ev.Anchor == anchor {
			return true
		}
	}
	return false
}

// operatorRepair does what docs/RELIABILITY.md has an operator do once the
// damaged bytes are put back: close, rebuild the index (which checks every
// record again and so holds no mark of the old damage), reopen.
func operatorRepair(t *testing.T, db *DB, fs vfs.FS, opts Options) *DB {
	t.Helper()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	opts.FS = fs
	if _, err := RebuildIndex(context.Background(), "db", opts, true); err != nil {
		t.Fatalf("rebuild after the repair: %v", err)
	}
	return mustOpen(t, fs, opts)
}

// A read finds damage while appends to the same anchor seal segment after
// segment: the mark must not put back an older active segment in the 'a'
// row (the reason the leader, not the reader, writes it). After a reopen
// the anchor loads, is read-only, and verify finds the damage and nothing
// in the index.
func TestDamageFoundDuringSeals(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	opts := Options{FS: fs, SegmentSize: 1024}
	db := mustOpen(t, fs, opts)
	for i := 0; i < 40; i++ {
		if _, err := db.Put(ctx, "t", []byte{byte('a' + i%26), byte(i)}, bytes.Repeat([]byte{'v'}, 60)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	path := fs.PathJoin(segmentAnchorDir(fs, "db", "t"), segmentFileName(1))
	f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	e, _, _ := db.location("t", 2)
	if _, err := f.WriteAt([]byte{'w'}, e.Offset+int64(e.Size)-40); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()

	refused := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			if _, err := db.Put(ctx, "t", []byte{byte(i), byte(i >> 8), 'n'}, bytes.Repeat([]byte{'w'}, 60)); err != nil {
				refused <- err
				return
			}
		}
	}()
	if _, err := db.Record(ctx, "t", 2); errs.CodeOf(err) != errs.CodeHashMismatch {
		t.Fatalf("read of the damaged record: %v", err)
	}
	if err := <-refused; errs.CodeOf(err) != errs.CodeHashMismatch {
		t.Fatalf("appends stopped with %v, want the damage's INT_001", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = mustOpen(t, fs, opts)
	defer db.Close()
	if !reportsDamage(db, "t") {
		t.Fatalf("open did not report the damage: %+v", db.RecoveryReport())
	}
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Failures {
		if f.Code == errs.CodeIndexMismatch {
			t.Fatalf("the index disagrees after the mark: %+v", rep.Failures)
		}
	}
	if rep.OK {
		t.Fatal("verify found no damage")
	}
}

// Damage a read finds while Close waits for it: Close had already settled
// (the leader's last group, which writes the marks) and the applier had
// stopped, so the mark stayed in memory only, and after a clean close the
// next Open reads no segment: the anchor took appends again. The docs
// promise the mark by the next settle or Close.
func TestDamageFoundWhileClosingIsKept(t *testing.T) {
	ctx := context.Background()
	fs := damagedMidLog(t)
	db := mustOpen(t, fs, Options{})
	closed := make(chan error, 1)
	for rec, err := range db.Log(ctx, "t", 1, 0) {
		if err != nil {
			if errs.CodeOf(err) != errs.CodeHashMismatch {
				t.Fatalf("read of the damaged record: %v", err)
			}
			break
		}
		if rec.Seq == 1 {
			// The loop holds the read gate: Close settles, stops the
			// applier, then waits for it.
			go func() { closed <- db.Close() }()
			for !db.reads.Closing() {
				time.Sleep(time.Millisecond)
			}
		}
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	db = mustOpen(t, fs, Options{})
	defer db.Close()
	wantReadOnly(t, db, "after a close that waited for the read")
	if !reportsDamage(db, "t") {
		t.Fatalf("open did not report the damage: %+v", db.RecoveryReport())
	}
}

// After a crash, recovery moves the Lamport clock past every anchor's last
// counter (the clock is persisted only at settles), a damaged anchor's
// included. Otherwise a new local write gets a counter below records already
// held and loses, in merged order, to an older put of the same key (CONTRACT
// §1: counter = max(last counter of this anchor, highest counter the
// database has seen) + 1).
func TestDamagedAnchorStillAdvancesTheClock(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	db, err := Open("db", Options{FS: mem, SegmentSize: 1024, SettleBytes: 1 << 30, SettleInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if _, err := db.Append(ctx, Entry{Anchor: "a", Type: segment.TypePut, Key: []byte("k"), Value: bytes.Repeat([]byte{'a' + byte(i)}, 60)}); err != nil {
			t.Fatal(err)
		}
		if i == 12 {
			if err := db.Sync(context.Background()); err != nil { // the clock is persisted here; segment 1 sealed and settled
				t.Fatal(err)
			}
		}
	}
	// A flush of the index between settles: it now holds counters above the
	// persisted clock.
	if _, err := db.Compact(ctx, snapshot.DefaultPolicy(), CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	crashed := testutil.CrashClone(mem, vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, 2))})
	_ = db.Close()
	// A bit flip in the seal of anchor a's first (sealed) segment: damage.
	seg1 := crashed.PathJoin(segment.AnchorDir(crashed, "db", "a"), segment.FileName(1))
	f, err := crashed.OpenReadWrite(seg1, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	b := make([]byte, 1)
	_, _ = f.ReadAt(b, st.Size()-1)
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, st.Size()-1); err != nil {
		t.Fatal(err)
	}
	_ = f.Sync()
	_ = f.Close()

	db2, err := Open("db", Options{FS: crashed, SegmentSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	info, _, err := db2.AnchorInfo(context.Background(), "a")
	if err != nil || info.Damage == "" {
		t.Fatalf("anchor a should be damaged: %+v %v", info, err)
	}
	r, err := db2.Append(ctx, Entry{Anchor: "b", Type: segment.TypePut, Key: []byte("k"), Value: []byte("newest")})
	if err != nil {
		t.Fatal(err)
	}
	if r.Counter <= info.LastCounter {
		t.Errorf("new append got counter %d; the database already holds counter %d (anchor a)", r.Counter, info.LastCounter)
	}
	if v, err := db2.Get(ctx, []byte("k")); err != nil || string(v.Value) != "newest" {
		t.Errorf("Get right after an acknowledged put = %s seq %d, %v; want b's value", v.Anchor, v.Seq, err)
	}
}

// A finding of Verify or a read makes its anchor read-only until an operator
// rebuilds the index (damage.go), so a false finding on a healthy database
// stops the anchor's writers. The two tests below are ways a healthy
// database could get one.

// A compaction that truncates segments while Verify reads them: a segment
// Verify listed is gone, and its successor's header does not continue the
// chain Verify read. That is no damage: Verify does not report INT_002 for
// it, and the anchor stays writable.
func TestVerifyDuringTruncationMarksNothing(t *testing.T) {
	ctx := context.Background()
	fs := &openHookFS{FS: vfs.NewMem(), match: ".seg"}
	db := mustOpen(t, fs, Options{SegmentSize: 4096, InlineValueMax: 64})
	defer db.Close()
	fillOutOfLine(t, db, "a", 300)
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil { // S1
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "a", []byte("other"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	coverKeysCheckpoint(t, db)

	// Verify's first open of a segment runs the compaction that truncates
	// it, and waits for it a while (a compaction that waits for Verify
	// instead is the fix).
	done := make(chan struct{})
	var res CompactionResult
	var cerr error
	fs.hook = func() {
		go func() {
			defer close(done)
			res, cerr = db.Compact(ctx, truncatePolicy, CompactOptions{Apply: true})
		}()
		select {
		case <-done:
		case <-time.After(500 * time.Millisecond):
		}
	}
	fs.armed.Store(true)
	rep, err := db.Verify(ctx, VerifyOptions{})
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if cerr != nil || res.RemovedBytes == 0 {
		t.Fatalf("the compaction removed nothing: %v %s", cerr, res.Plan)
	}
	if _, err := db.Put(ctx, "a", []byte("after"), []byte("y")); err != nil {
		t.Fatalf("the anchor is read-only after a Verify across a truncation: %v", err)
	}
	if !rep.OK {
		t.Fatalf("Verify across a truncation: %+v", rep.Failures)
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("verify after: %+v %v", rep, err)
	}
}

// A checkpoint passed as VerifyOptions.From is the caller's claim: one that
// disagrees with the anchors' trees (a wrong root, more records than the log
// has) is reported, and each anchor is then checked in full, which finds any
// damage of the log itself. The disagreement alone makes no anchor
// read-only, or any checkpoint object with this database's origin, signed by
// anyone (or, built in code, by no one), would stop their writers. The same
// holds for what the stored checkpoints claim.
func TestVerifyFromAWrongCheckpointMarksNothing(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, memOpts(fs))
	defer db.Close()
	appendN(t, db, []string{"a", "b"}, 30, "x")
	skey, _ := coverKeys(t)
	_, cp, err := db.CreateCheckpoint(ctx, skey)
	if err != nil {
		t.Fatal(err)
	}
	entries := slices.Clone(cp.Entries)
	entries[0].Root[0] ^= 1 // a: another root
	entries[1].Size += 5    // b: records the log does not have
	wrong, err := proof.NewCheckpoint(db.ID(), cp.Time, entries)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := db.Verify(ctx, VerifyOptions{From: wrong})
	if err != nil || rep.OK {
		t.Fatalf("a wrong checkpoint is not reported: %+v %v", rep, err)
	}
	for _, f := range rep.Failures {
		if f.Anchor != "a" && f.Anchor != "b" {
			t.Fatalf("finding %+v", f)
		}
	}
	for _, a := range []string{"a", "b"} {
		if _, err := db.Put(ctx, a, []byte("k"), []byte("v")); err != nil {
			t.Errorf("anchor %s is read-only after a Verify from a wrong checkpoint: %v", a, err)
		}
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("verify without it: %+v %v", rep, err)
	}
}
