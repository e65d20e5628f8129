package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestVerifyTruncatedLog: after compaction removed sealed segments and left
// stubs, the database verifies — fully, after a reopen, and from a
// checkpoint taken before the cut — and damage to a stub or to the rows of
// truncated records is found.
func TestVerifyTruncatedLog(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	opts := Options{FS: fs, SegmentSize: 4096, InlineValueMax: 64}
	db := mustOpen(t, fs, opts)
	defer func() { _ = db.Close() }()
	put := func(n int, tag string) {
		for i := 0; i < n; i++ {
			e := Entry{Anchor: fmt.Sprintf("a%d", i%3), Type: segment.TypePut, Key: []byte(fmt.Sprintf("k%03d", i%40)), Value: []byte(fmt.Sprint(tag, i))}
			if tag == "x" && i < 30 {
				e.Key = []byte(fmt.Sprintf("early%d", i)) // never written again: kept across the cut
			}
			if i%5 == 0 {
				e.IdempotencyKey = []byte(fmt.Sprint(tag, "-op-", i))
			}
			if i%11 == 4 {
				e.Type, e.Value = segment.TypeDelete, nil
			}
			if _, err := db.Append(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(400, "x")
	skey, vkey, _ := proof.GenerateKeys("k")
	msg, _, err := db.CreateCheckpoint(ctx, skey)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := proof.OpenCheckpoint(msg, vkey)
	policy := snapshot.Policy{Version: "v1", Snapshot: snapshot.Triggers{EveryRecords: 1}, KeepSnapshots: 1, RawLog: "truncate", VerifyBeforeDelete: true}
	if _, err := coveredCompact(t, db, policy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	put(60, "y")
	res, err := coveredCompact(t, db, policy, CompactOptions{Apply: true})
	if err != nil || res.RemovedBytes == 0 {
		t.Fatalf("compaction truncated nothing: %+v %v", res, err)
	}
	stubs := map[string][]string{}
	for _, a := range []string{"a0", "a1", "a2"} {
		dir := segment.AnchorDir(fs, "db", a)
		names, _ := fs.List(dir)
		for _, n := range names {
			if _, ok := segment.ParseStubFileName(n); ok {
				stubs[a] = append(stubs[a], fs.PathJoin(dir, n))
			}
		}
		slices.Sort(stubs[a])
	}
	if len(stubs["a1"]) == 0 {
		t.Fatalf("no stubs: %v", stubs)
	}
	check := func(what string) {
		t.Helper()
		rep, err := db.Verify(ctx, VerifyOptions{VerifierKeys: []string{vkey, coverVKey(t)}})
		if err != nil || !rep.OK {
			t.Fatalf("%s: %+v %v", what, rep, err)
		}
		rep, err = db.Verify(ctx, VerifyOptions{From: before})
		if err != nil || !rep.OK || rep.Records != 60 {
			t.Fatalf("%s, from the checkpoint before the cut: %+v %v", what, rep, err)
		}
	}
	check("truncated")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = mustOpen(t, fs, opts)
	check("reopened")
	if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
		t.Fatalf("checkpoint after the cut: %v", err)
	}

	// A damaged stub.
	path := stubs["a1"][0]
	orig, _ := testutil.ReadFile(fs, path)
	bad := slices.Clone(orig)
	bad[len(bad)/2] ^= 1
	testutil.WriteFile(fs, path, bad)
	rep := wantFinding(t, db, errs.CodeHashMismatch, "a1", 1, "segment stub")
	if rep.Failures[0].File != path || rep.Failures[0].Offset != 0 {
		t.Fatalf("stub finding %+v", rep.Failures[0])
	}
	testutil.WriteFile(fs, path, orig)
	db = operatorRepair(t, db, fs, opts)
	// Verify loads every anchor's head and tree, before the rows below
	// are altered under it.
	check("rebuilt after the stub's repair")
	// A truncated record's row with another hash.
	e, _, _ := db.location("a2", 3)
	if e.Size != 0 {
		t.Fatalf("seq 3 of a2 is not truncated: %+v", e)
	}
	good := e.Append(nil)
	e.Hash[0] ^= 1
	setRow(t, db, schema.SeqKey("a2", 3), e.Append(nil))
	wantFinding(t, db, errs.CodeIndexMismatch, "a2", 3, "truncated seq 3")
	setRow(t, db, schema.SeqKey("a2", 3), good)
	// A kept version of a truncated record that says something else.
	it, _ := db.index.NewIter(nil)
	var k, v []byte
	for ok := it.First(); ok; ok = it.Next() {
		if it.Key()[0] == schema.TagKey && schema.KindOf(it.Value()) == schema.Kept {
			k, v = slices.Clone(it.Key()), slices.Clone(it.Value())
			break
		}
	}
	it.Close()
	if k == nil {
		t.Fatal("no kept version of a truncated record")
	}
	ve, _ := schema.DecodeVersion(v)
	ve.Value = append(slices.Clone(ve.Value), 'X')
	ve.Type, ve.Inline = schema.VersionPut, true
	setRow(t, db, k, ve.Append(nil))
	_, _, anchor, _ := schema.ParseVersionKey(k)
	wantFinding(t, db, errs.CodeIndexMismatch, anchor, ve.Seq, "kept for truncated seq")
	setRow(t, db, k, v)
	check("repaired")
}

// truncatedUnderCheckpoint writes records on three anchors, signs a checkpoint after the
// first 60, writes 340 more, and compacts twice with raw_log "truncate", so
// that the checkpoint's sizes fall inside segments that are now stubs.
func truncatedUnderCheckpoint(t *testing.T, fs vfs.FS) (*DB, *proof.Checkpoint, string) {
	t.Helper()
	ctx := context.Background()
	db, err := Open("db", fixtureOptions(fs))
	if err != nil {
		t.Fatal(err)
	}
	skey, vkey, _ := proof.GenerateKeys("zz")
	put := func(i int) {
		a := fmt.Sprintf("a%d", i%3)
		if _, err := db.Put(ctx, a, []byte(fmt.Sprintf("k%03d", i%50)), []byte(fmt.Sprintf("v%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 61; i++ {
		put(i)
	}
	msg, _, err := db.CreateCheckpoint(ctx, skey)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := proof.OpenCheckpoint(msg, vkey)
	if err != nil {
		t.Fatal(err)
	}
	for i := 61; i < 400; i++ {
		put(i)
	}
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	for i := 400; i < 430; i++ {
		put(i)
	}
	res, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true})
	if err != nil || res.RemovedBytes == 0 {
		t.Fatalf("compact: %+v %v", res, err)
	}
	for _, e := range cp.Entries {
		first, err := db.firstPresent(e.Anchor)
		if err != nil || first <= e.Size {
			t.Fatalf("setup: anchor %s first present seq %d, checkpoint size %d (%v): the checkpoint must fall in the truncated part", e.Anchor, first, e.Size, err)
		}
	}
	return db, cp, vkey
}

// An incremental verify (VerifyOptions.From) whose trusted sizes lie inside
// stubs passes on a sound database after the index is rebuilt from the
// files, as it does with the index compaction wrote. The rebuilt 's' rows
// of truncated records say offset 0, which the pass took for "start of the
// segment" and so began a full check inside the stub: a false INT_002 and
// an INT_004 per trusted seq (stop 18's review).
func TestIncrementalVerifyInsideAStubAfterRebuild(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, cp, vkey := truncatedUnderCheckpoint(t, fs)
	// Control: with the index compaction wrote, the incremental check passes.
	rep, err := db.Verify(ctx, VerifyOptions{From: cp, VerifierKeys: []string{vkey, coverVKey(t)}})
	if err != nil || !rep.OK {
		t.Fatalf("before the rebuild: %+v %v", rep, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fs.RemoveAll("db/index"); err != nil {
		t.Fatal(err)
	}
	db, err = Open("db", fixtureOptions(fs))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if rep, err := db.Verify(ctx, VerifyOptions{VerifierKeys: []string{vkey, coverVKey(t)}}); err != nil || !rep.OK {
		t.Fatalf("full verify after the rebuild: %+v %v", rep, err)
	}
	rep, err = db.Verify(ctx, VerifyOptions{From: cp, VerifierKeys: []string{vkey, coverVKey(t)}})
	if err != nil || !rep.OK {
		for _, f := range rep.Failures {
			t.Logf("finding: %s %s seq %d: %s", f.Code, f.Anchor, f.Seq, f.Message)
		}
		t.Fatalf("incremental verify from a valid checkpoint after rebuild-index: ok=%v err=%v, want ok", rep.OK, err)
	}
}

// TestVerifyHoldsAnUnreplayableSnapshotToTheAuditLog: a snapshot whose log
// was truncated below its frontier cannot be proved by replay, and its file
// and state hashes are unkeyed: a rewritten one (another value, hashes
// recomputed) passed verify (stop 18's review). verify now requires such a
// snapshot to be the one the audit log recorded as created.
func TestVerifyHoldsAnUnreplayableSnapshotToTheAuditLog(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, _, _ := truncatedUnderCheckpoint(t, fs)
	defer db.Close()
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("setup verify: %+v %v", rep, err)
	}
	target, forged, entries := forgeUnreplayableSnapshot(t, db, fs)
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK {
		t.Fatalf("verify accepts snapshot %s, a rewrite of %s with key %q set to %q (state hash %s, was %s)",
			forged.Name, target.Name, entries[0].Key, entries[0].Value, forged.StateHash, target.StateHash)
	}
	// The forgery took the place of the audited snapshot, whose file is
	// gone: both are INT_003, and nothing else is.
	forgeryFound := false
	for _, f := range rep.Failures {
		forgeryFound = forgeryFound || f.File == forged.Path
		if f.Code != errs.CodeSnapshotCorrupted || f.File != forged.Path && f.File != target.Path {
			t.Errorf("finding %s %s: %s; want only INT_003 for %s and the missing %s", f.Code, f.File, f.Message, forged.Name, target.Name)
		}
	}
	if !forgeryFound {
		t.Errorf("no finding for the forged snapshot %s: %+v", forged.Name, rep.Failures)
	}
}

// coverVKey is the verifier key of coveredCompact's checkpoints.
func coverVKey(t testing.TB) string {
	_, vkey := coverKeys(t)
	return vkey
}

// TestVerifyTakesNoVoucherPastTheAuditHead: the audit chain has no key, so
// a line appended to the file after the head the index recorded vouches for
// nothing: a rewritten unreplayable snapshot with such a line is still
// INT_003 (stop 18's fourth review).
func TestVerifyTakesNoVoucherPastTheAuditHead(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, _, _ := truncatedUnderCheckpoint(t, fs)
	defer db.Close()
	target, forged, entries := forgeUnreplayableSnapshot(t, db, fs)
	// The one extra step: a well-chained audit line for the forged file.
	if _, err := snapshot.Append(fs, db.AuditPath(), snapshot.AuditEntry{Time: time.Now(),
		Action: string(snapshot.ActionCreateSnapshot), Added: []snapshot.AuditItem{snapshot.SnapshotItem(forged)}}); err != nil {
		t.Fatal(err)
	}
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK {
		t.Fatalf("verify accepts snapshot %s, a rewrite of %s with key %q set to %q, vouched for by an audit line appended after the head the index recorded",
			forged.Name, target.Name, entries[0].Key, entries[0].Value)
	}
}

// forgeUnreplayableSnapshot rewrites a snapshot the log can no longer replay
// with its first key's value changed, hashes recomputed, and removes the
// original: what anyone with write access could do. It returns the
// original's info, the forgery's, and the forgery's entries.
func forgeUnreplayableSnapshot(t *testing.T, db *DB, fs vfs.FS) (target, forged snapshot.Info, entries []snapshot.Entry) {
	t.Helper()
	ctx := context.Background()
	list, err := db.Snapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for i := range list {
		v, err := db.VerifySnapshot(ctx, list[i].Path)
		if err != nil {
			t.Fatal(err)
		}
		if !v.Replayed {
			target, found = list[i], true
		}
	}
	if !found {
		t.Fatal("scenario: no snapshot the log cannot replay")
	}
	s, err := snapshot.Open(fs, target.Path)
	if err != nil {
		t.Fatal(err)
	}
	for e, err := range s.Entries() {
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e.Clone())
	}
	info := s.Info()
	_ = s.Close()
	entries[0].Value = []byte("FORGED")
	forged, err = snapshot.Create(fs, db.SnapshotsDir(), snapshot.Meta{Frontier: info.Frontier, PolicyRef: info.PolicyRef, Created: info.Created},
		func(yield func(snapshot.Entry, error) bool) {
			for _, e := range entries {
				if !yield(e, nil) {
					return
				}
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := snapshot.Delete(fs, target.Path); err != nil {
		t.Fatal(err)
	}
	return target, forged, entries
}

// TestForgedAuditLineIsNotLaunderedByTheNextAppend: a line appended to the
// audit log by anyone else must not come to count when the database writes
// its next line after it (stop 18's fifth review: it then vouched for a
// forged snapshot). The database refuses to append past a line it did not
// write, and verify still reports the forgery.
func TestForgedAuditLineIsNotLaunderedByTheNextAppend(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, _, _ := truncatedUnderCheckpoint(t, fs)
	defer db.Close()
	_, forged, _ := forgeUnreplayableSnapshot(t, db, fs)
	if _, err := snapshot.Append(fs, db.AuditPath(), snapshot.AuditEntry{Time: time.Now(),
		Action: string(snapshot.ActionCreateSnapshot), Added: []snapshot.AuditItem{snapshot.SnapshotItem(forged)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "a0", []byte("zz"), []byte("zz")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateSnapshot(ctx, ""); CodeOf(err) != errs.CodeChainBroken {
		t.Fatalf("an audited action after a foreign line: %v; want INT_002", err)
	}
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK {
		t.Fatalf("verify accepts forged snapshot %s after the database's next audited action", forged.Name)
	}
}
