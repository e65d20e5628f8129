package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// verifyFixture is an open database with 3 anchors and 900 records, so that
// trees have stored nodes at level 8, and its records by anchor.
func verifyFixture(t *testing.T) (*DB, map[string][]segment.Record) {
	t.Helper()
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{FS: fs, SegmentSize: 8 << 10, NoSync: true})
	t.Cleanup(func() { _ = db.Close() })
	for i := 0; i < 900; i++ {
		e := Entry{Anchor: fmt.Sprintf("a%d", i%3), Type: segment.TypePut, Key: []byte(fmt.Sprintf("k%d", i%11)), Value: []byte(fmt.Sprintf("v%d", i))}
		if i%4 == 1 {
			e.IdempotencyKey = []byte(fmt.Sprintf("op%d", i))
		}
		if i%9 == 2 {
			e.Type, e.Value = segment.TypeDelete, nil
		}
		if _, err := db.Append(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	recs := map[string][]segment.Record{}
	for _, a := range []string{"a0", "a1", "a2"} {
		for r, err := range db.Log(ctx, a, 1, 0) {
			if err != nil {
				t.Fatal(err)
			}
			recs[a] = append(recs[a], *r.segment())
		}
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("fixture does not verify: %+v %v", rep, err)
	}
	return db, recs
}

// wantFinding verifies and requires a finding with the code for the anchor
// (and seq, when not 0) whose message contains text.
func wantFinding(t *testing.T, db *DB, code errs.Code, anchor string, seq uint64, text string) VerifyReport {
	t.Helper()
	rep, err := db.Verify(context.Background(), VerifyOptions{})
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	for _, f := range rep.Failures {
		if f.Code == code && f.Anchor == anchor && (seq == 0 || f.Seq == seq) && strings.Contains(f.Message, text) {
			return rep
		}
	}
	t.Fatalf("want %s for %s seq %d (%q), got %+v", code, anchor, seq, text, rep.Failures)
	return rep
}

func setRow(t *testing.T, db *DB, k, v []byte) {
	t.Helper()
	var err error
	if v == nil {
		err = db.index.Delete(k, pebble.NoSync)
	} else {
		err = db.index.Set(k, v, pebble.NoSync)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func getRow(t *testing.T, db *DB, k []byte) []byte {
	t.Helper()
	v, closer, err := db.index.Get(k)
	if err != nil {
		t.Fatalf("get %x: %v", k, err)
	}
	defer closer.Close()
	return append([]byte(nil), v...)
}

func TestVerifyIndexDamage(t *testing.T) {
	t.Run("seq row missing", func(t *testing.T) {
		db, _ := verifyFixture(t)
		setRow(t, db, schema.SeqKey("a1", 57), nil)
		wantFinding(t, db, errs.CodeIndexMismatch, "a1", 57, "no 's' row")
	})
	t.Run("seq row wrong", func(t *testing.T) {
		db, _ := verifyFixture(t)
		e, _, _ := db.location("a2", 99)
		e.Counter++
		setRow(t, db, schema.SeqKey("a2", 99), e.Append(nil))
		wantFinding(t, db, errs.CodeIndexMismatch, "a2", 99, "'s' row of seq 99")
	})
	t.Run("seq row extra", func(t *testing.T) {
		db, _ := verifyFixture(t)
		e, _, _ := db.location("a0", 300)
		e.Offset += 1000
		setRow(t, db, schema.SeqKey("a0", 301), e.Append(nil))
		wantFinding(t, db, errs.CodeIndexMismatch, "a0", 301, "past the anchor's head")
		wantFinding(t, db, errs.CodeChainBroken, "a0", 301, "in the index but not in the segments")
	})
	t.Run("key row missing", func(t *testing.T) {
		db, recs := verifyFixture(t)
		r := recs["a1"][40]
		setRow(t, db, schema.VersionKey(r.Key, r.Counter, "a1"), nil)
		wantFinding(t, db, errs.CodeIndexMismatch, "a1", r.Seq, "no 'k' row")
	})
	t.Run("key row wrong value", func(t *testing.T) {
		db, recs := verifyFixture(t)
		r := recs["a2"][10]
		k := schema.VersionKey(r.Key, r.Counter, "a2")
		v := getRow(t, db, k)
		v[len(v)-1] ^= 1 // the inline value
		setRow(t, db, k, v)
		wantFinding(t, db, errs.CodeIndexMismatch, "a2", r.Seq, "'k' row of record")
	})
	t.Run("key row extra", func(t *testing.T) {
		db, recs := verifyFixture(t)
		r := recs["a0"][12]
		v := getRow(t, db, schema.VersionKey(r.Key, r.Counter, "a0"))
		setRow(t, db, schema.VersionKey([]byte("never-written"), r.Counter, "a0"), v)
		wantFinding(t, db, errs.CodeIndexMismatch, "a0", r.Seq, "not implied by any record")
	})
	t.Run("key row of an unknown anchor", func(t *testing.T) {
		db, recs := verifyFixture(t)
		r := recs["a0"][12]
		v := getRow(t, db, schema.VersionKey(r.Key, r.Counter, "a0"))
		setRow(t, db, schema.VersionKey(r.Key, r.Counter, "ghost"), v)
		wantFinding(t, db, errs.CodeIndexMismatch, "ghost", 0, "does not know")
	})
	t.Run("idempotency row missing and wrong", func(t *testing.T) {
		db, recs := verifyFixture(t)
		var withKey []segment.Record
		for _, r := range recs["a1"] {
			if r.IdempotencyKey != nil {
				withKey = append(withKey, r)
			}
		}
		setRow(t, db, schema.IdemKey("a1", withKey[3].IdempotencyKey), nil)
		k := schema.IdemKey("a1", withKey[5].IdempotencyKey)
		v := getRow(t, db, k)
		v[len(v)-1] ^= 1 // the fingerprint
		setRow(t, db, k, v)
		wantFinding(t, db, errs.CodeIndexMismatch, "a1", withKey[3].Seq, "no 'i' row")
		wantFinding(t, db, errs.CodeIndexMismatch, "a1", withKey[5].Seq, "'i' row of record")
	})
	t.Run("tree node wrong, missing, extra", func(t *testing.T) {
		db, _ := verifyFixture(t)
		v := getRow(t, db, schema.NodeKey("a0", 8, 0))
		v[0] ^= 1
		setRow(t, db, schema.NodeKey("a0", 8, 0), v)
		setRow(t, db, schema.NodeKey("a1", 8, 0), nil)
		setRow(t, db, schema.NodeKey("a2", 8, 5), v)
		wantFinding(t, db, errs.CodeIndexMismatch, "a0", 256, "'n' row of tree node level 8 index 0")
		wantFinding(t, db, errs.CodeIndexMismatch, "a1", 256, "no 'n' row")
		wantFinding(t, db, errs.CodeIndexMismatch, "a2", 6*256, "does not complete")
	})
	t.Run("anchor row wrong", func(t *testing.T) {
		db, _ := verifyFixture(t)
		v := getRow(t, db, schema.AnchorKey("a2"))
		m, err := schema.DecodeAnchorMeta(v)
		if err != nil {
			t.Fatal(err)
		}
		m.ActiveSegno += 3
		setRow(t, db, schema.AnchorKey("a2"), m.Append(nil))
		wantFinding(t, db, errs.CodeIndexMismatch, "a2", 0, "'a' row names active segment")
	})
	t.Run("in-memory tree wrong", func(t *testing.T) {
		db, _ := verifyFixture(t)
		a, _ := db.getAnchor("a1", false)
		a.mu.Lock()
		r := merkleFactory.NewEmptyRange(0)
		for i := uint64(0); i < a.visTree.End(); i++ {
			_ = r.Append(segment.Blake3RFC6962.HashLeaf([]byte{byte(i)}), nil)
		}
		a.visTree = r
		a.mu.Unlock()
		wantFinding(t, db, errs.CodeIndexMismatch, "a1", 300, "in-memory Merkle tree")
	})
	t.Run("anchor the index lost", func(t *testing.T) {
		db, _ := verifyFixture(t)
		setRow(t, db, schema.AnchorKey("a0"), nil)
		wantFinding(t, db, errs.CodeIndexMismatch, "a0", 0, "which the index does not know")
	})
}

// TestVerifyOptions: restriction, an unknown anchor, StopAtFirst, progress
// and threads.
func TestVerifyOptions(t *testing.T) {
	ctx := context.Background()
	db, _ := verifyFixture(t)
	rep, err := db.Verify(ctx, VerifyOptions{Anchors: []string{"a1"}, Threads: 3})
	if err != nil || !rep.OK || rep.Anchors != 1 || rep.Records != 300 {
		t.Fatalf("restricted: %+v %v", rep, err)
	}
	if _, err := db.Verify(ctx, VerifyOptions{Anchors: []string{"nope"}}); errs.CodeOf(err) != errs.CodeDependencyMissing {
		t.Fatalf("unknown anchor: %v", err)
	}
	if _, err := db.Verify(ctx, VerifyOptions{Anchors: []string{""}}); errs.CodeOf(err) != errs.CodeInvalidInput {
		t.Fatalf("bad anchor: %v", err)
	}
	for _, a := range []string{"a0", "a1", "a2"} {
		setRow(t, db, schema.SeqKey(a, 7), nil)
		setRow(t, db, schema.SeqKey(a, 9), nil)
	}
	rep, err = db.Verify(ctx, VerifyOptions{})
	if err != nil || len(rep.Failures) < 6 {
		t.Fatalf("all findings: %+v %v", rep, err)
	}
	rep, err = db.Verify(ctx, VerifyOptions{StopAtFirst: true, Threads: 1})
	if err != nil || rep.OK || len(rep.Failures) != 1 {
		t.Fatalf("stop at first: %d findings, %v", len(rep.Failures), err)
	}
	var last VerifyProgress
	calls := 0
	rep, err = db.Verify(ctx, VerifyOptions{Anchors: []string{"a2"}, Progress: func(p VerifyProgress) { last = p; calls++ }})
	if err != nil || calls == 0 || last.AnchorsDone != 1 || last.Anchors != 1 || last.Records != 300 || last.Bytes <= 0 || last.TotalBytes < last.Bytes {
		t.Fatalf("progress: %+v after %d calls, %v", last, calls, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := db.Verify(cctx, VerifyOptions{}); err == nil {
		t.Fatal("verify with an ended context succeeded")
	}
}
