package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// SPEC §3: damage in the middle of a log makes the anchor read-only until an
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
