package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// truncatedFixture is an open database whose three anchors were truncated
// by compaction (raw_log "truncate"), so that their oldest segments are
// stubs, with idempotency keys and kept versions among the removed records.
func truncatedFixture(t *testing.T) *DB {
	t.Helper()
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, fixtureOptions(fs))
	t.Cleanup(func() { _ = db.Close() })
	put := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			e := Entry{Anchor: fmt.Sprintf("a%d", i%3), Type: segment.TypePut, Key: []byte(fmt.Sprintf("k%03d", i%50)), Value: []byte(fmt.Sprintf("v%d", i))}
			if i%5 == 0 {
				e.IdempotencyKey = []byte(fmt.Sprint("op-", i))
			}
			if _, err := db.Append(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(0, 400)
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	put(400, 430)
	if res, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil || res.RemovedBytes == 0 {
		t.Fatalf("compact: %+v %v", res, err)
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("fixture does not verify: %+v %v", rep, err)
	}
	return db
}

// A truncated record's 's' row must carry the counter its stub records:
// the stub is what is left of the log, and the merged order and a rebuilt
// index take the counter from it. Verify compared only the hash, so a row
// with another counter — still between its neighbours' — passed (INT_004
// missed).
func TestReviewVerifyTruncatedCounter(t *testing.T) {
	db := truncatedFixture(t)
	e, _, err := db.location("a1", 5)
	if err != nil || e.Size != 0 {
		t.Fatalf("seq 5 of a1 is not truncated: %+v %v", e, err)
	}
	next, _, _ := db.location("a1", 6)
	if next.Counter <= e.Counter+1 {
		t.Fatalf("no room for another counter between seqs 5 and 6: %d %d", e.Counter, next.Counter)
	}
	good := e.Append(nil)
	e.Counter++
	setRow(t, db, schema.SeqKey("a1", 5), e.Append(nil))
	wantFinding(t, db, errs.CodeIndexMismatch, "a1", 5, "counter")
	setRow(t, db, schema.SeqKey("a1", 5), good)
	if rep, err := db.Verify(context.Background(), VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("repaired: %+v %v", rep, err)
	}
}

// The idempotency keys of truncated records live on in their stub and in
// 'i' rows (a key once used is never freed, SPEC §7). Verify checked such a
// row only against the record's 's' row, never against the stub: a deleted
// row (the key freed: a retry appends again), a row with another
// fingerprint (a retry refused as a conflict) or a forged row naming a
// truncated seq (a new append answered "duplicate" and dropped) all passed.
func TestReviewVerifyTruncatedIdempotencyRows(t *testing.T) {
	db := truncatedFixture(t)
	k := schema.IdemKey("a1", []byte("op-10"))
	v := getRow(t, db, k)
	ie, err := schema.DecodeIdem(v)
	if err != nil {
		t.Fatal(err)
	}
	if e, _, _ := db.location("a1", ie.Seq); e.Size != 0 {
		t.Fatalf("the record of op-10 is not truncated: %+v", e)
	}
	t.Run("deleted", func(t *testing.T) {
		setRow(t, db, k, nil)
		defer setRow(t, db, k, v)
		wantFinding(t, db, errs.CodeIndexMismatch, "a1", ie.Seq, "'i' row")
	})
	t.Run("other fingerprint", func(t *testing.T) {
		bad := ie
		bad.Fingerprint[0] ^= 1
		setRow(t, db, k, bad.Append(nil))
		defer setRow(t, db, k, v)
		wantFinding(t, db, errs.CodeIndexMismatch, "a1", ie.Seq, "'i' row")
	})
	t.Run("forged key", func(t *testing.T) {
		forged := schema.IdemKey("a1", []byte("never-used"))
		setRow(t, db, forged, v)
		defer setRow(t, db, forged, nil)
		wantFinding(t, db, errs.CodeIndexMismatch, "a1", ie.Seq, "'i' row")
	})
	if rep, err := db.Verify(context.Background(), VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("repaired: %+v %v", rep, err)
	}
}

// A stub keeps the last version of each key its segment wrote, and the
// index keeps it in a 'k' row and an 'r' row, so the state at the cut
// stays (a delete there must stay a delete). Verify checked those rows only
// when they were there: deleting the 'k' row, or both, passed.
func TestReviewVerifyKeptVersionRows(t *testing.T) {
	db := truncatedFixture(t)
	it, err := db.index.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	var k, v []byte
	for ok := it.First(); ok; ok = it.Next() {
		if it.Key()[0] == schema.TagKey && schema.KindOf(it.Value()) == schema.Kept {
			k, v = slices.Clone(it.Key()), slices.Clone(it.Value())
			break
		}
	}
	_ = it.Close()
	if k == nil {
		t.Fatal("no kept version of a truncated record")
	}
	ve, _ := schema.DecodeVersion(v)
	_, _, anchor, _ := schema.ParseVersionKey(k)
	rk := schema.KeptKey(anchor, ve.Seq)
	rv := getRow(t, db, rk)
	t.Run("k row deleted", func(t *testing.T) {
		setRow(t, db, k, nil)
		defer setRow(t, db, k, v)
		wantFinding(t, db, errs.CodeIndexMismatch, anchor, ve.Seq, "'k' row")
	})
	t.Run("k and r rows deleted", func(t *testing.T) {
		setRow(t, db, k, nil)
		setRow(t, db, rk, nil)
		defer setRow(t, db, k, v)
		defer setRow(t, db, rk, rv)
		wantFinding(t, db, errs.CodeIndexMismatch, anchor, ve.Seq, "'r' row")
	})
	if rep, err := db.Verify(context.Background(), VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("repaired: %+v %v", rep, err)
	}
}

// The same rows are checked by an incremental verify that starts inside a
// stub, for the records after its trusted size.
func TestReviewVerifyKeptVersionRowsFromCheckpoint(t *testing.T) {
	ctx := context.Background()
	db, cp, vkey := truncatedUnderCheckpoint(t, vfs.NewMem())
	defer func() { _ = db.Close() }()
	opts := VerifyOptions{From: cp, VerifierKeys: []string{vkey, coverVKey(t)}}
	if rep, err := db.Verify(ctx, opts); err != nil || !rep.OK {
		t.Fatalf("sound: %+v %v", rep, err)
	}
	it, err := db.index.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	var k, v []byte
	var anchor string
	var ve schema.Version
	for ok := it.First(); ok; ok = it.Next() {
		if it.Key()[0] != schema.TagKey || schema.KindOf(it.Value()) != schema.Kept {
			continue
		}
		ve, _ = schema.DecodeVersion(it.Value())
		_, _, anchor, _ = schema.ParseVersionKey(it.Key())
		if e, ok := cp.Entry(anchor); ok && ve.Seq > e.Size {
			k, v = slices.Clone(it.Key()), slices.Clone(it.Value())
			break
		}
	}
	_ = it.Close()
	if k == nil {
		t.Fatal("no kept version of a truncated record after the checkpoint")
	}
	rk := schema.KeptKey(anchor, ve.Seq)
	rv := getRow(t, db, rk)
	setRow(t, db, k, nil)
	setRow(t, db, rk, nil)
	rep, err := db.Verify(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range rep.Failures {
		found = found || f.Code == errs.CodeIndexMismatch && f.Anchor == anchor && f.Seq == ve.Seq
	}
	if !found {
		t.Fatalf("kept version rows of %s seq %d deleted: want INT_004, got %+v", anchor, ve.Seq, rep.Failures)
	}
	setRow(t, db, k, v)
	setRow(t, db, rk, rv)
	if rep, err := db.Verify(ctx, opts); err != nil || !rep.OK {
		t.Fatalf("repaired: %+v %v", rep, err)
	}
}

// listHookFS calls onList before listing a directory.
type listHookFS struct {
	vfs.FS
	onList func(dir string)
}

func (h *listHookFS) List(dir string) ([]string, error) {
	if h.onList != nil {
		h.onList(dir)
	}
	return h.FS.List(dir)
}

// Verify works on a live database. It read the stored checkpoints after
// its index snapshot, so a checkpoint signed in between — of records the
// snapshot does not hold — read as one that lists more records than the
// database has: a false INT_002 on a sound database.
func TestReviewVerifyCheckpointSignedDuringVerify(t *testing.T) {
	ctx := context.Background()
	hfs := &listHookFS{FS: vfs.NewMem()}
	db := mustOpen(t, hfs, Options{FS: hfs, SegmentSize: 4096})
	defer func() { _ = db.Close() }()
	skey, _, _ := proof.GenerateKeys("k")
	appendN(t, db, []string{"a", "b"}, 20, "x")
	var armed atomic.Bool
	hfs.onList = func(dir string) {
		// Verify lists the checkpoints once; sign one with more records
		// just before.
		if strings.HasSuffix(dir, CheckpointsDir) && armed.CompareAndSwap(true, false) {
			appendN(t, db, []string{"a", "b"}, 4, "y")
			if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
				t.Error(err)
			}
		}
	}
	armed.Store(true)
	rep, err := db.Verify(ctx, VerifyOptions{})
	if armed.Load() {
		t.Fatal("verify listed no checkpoints")
	}
	if err != nil || !rep.OK {
		t.Fatalf("a checkpoint signed during verify: %+v %v", rep, err)
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK || rep.Records != 24 {
		t.Fatalf("after: %+v %v", rep, err)
	}
}

// Index rows of an anchor the index does not know (no 'a' row, no
// segments) are not a projection of any log. Verify reported such 'k' rows
// but looked at no other table, so a forged 'i' row for an anchor not yet
// written passed — and its first append with that idempotency key was then
// refused as a conflict, or answered "duplicate" and dropped — as did
// 's', 'n' and 'r' rows of such an anchor (INT_004 missed).
func TestReviewVerifyRowsOfUnknownAnchor(t *testing.T) {
	ctx := context.Background()
	db, _ := verifyFixture(t)
	rows := map[string][2][]byte{
		"'i'": {schema.IdemKey("ghost-i", []byte("op")), (&schema.Idem{Seq: 1, Counter: 5}).Append(nil)},
		"'s'": {schema.SeqKey("ghost-s", 1), (&schema.Location{Segno: 1, Offset: 100, Size: 50, Counter: 3}).Append(nil)},
		"'n'": {schema.NodeKey("ghost-n", 8, 0), make([]byte, segment.HashSize)},
		"'r'": {schema.KeptKey("ghost-r", 1), []byte("frame")},
	}
	for name, kv := range rows {
		t.Run(name, func(t *testing.T) {
			setRow(t, db, kv[0], kv[1])
			defer setRow(t, db, kv[0], nil)
			rep, err := db.Verify(ctx, VerifyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			anchor := "ghost-" + name[1:2]
			for _, f := range rep.Failures {
				if f.Code == errs.CodeIndexMismatch && f.Anchor == anchor {
					return
				}
			}
			t.Fatalf("%s row of unknown anchor %q: want INT_004, got %+v", name, anchor, rep.Failures)
		})
	}
	// A verify restricted to some anchors does not look for them.
	setRow(t, db, rows["'i'"][0], rows["'i'"][1])
	if rep, err := db.Verify(ctx, VerifyOptions{Anchors: []string{"a1"}}); err != nil || !rep.OK {
		t.Fatalf("restricted: %+v %v", rep, err)
	}
}
