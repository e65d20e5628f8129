package engine

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

func appendN(t *testing.T, db *DB, anchors []string, n int, tag string) {
	t.Helper()
	for i := 0; i < n; i++ {
		a := anchors[i%len(anchors)]
		if _, err := db.Put(context.Background(), a, []byte(fmt.Sprint(tag, i%5)), []byte(fmt.Sprint(tag, i))); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCheckpointCreate(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, memOpts(fs))
	defer func() { _ = db.Close() }()
	skey, vkey, err := proof.GenerateKeys("test.example/anchordb")
	if err != nil {
		t.Fatal(err)
	}
	anchors := []string{"a", "b b", `c"`}
	appendN(t, db, anchors, 90, "x")

	msg, cp, err := db.CreateCheckpoint(ctx, skey+"\n")
	if err != nil {
		t.Fatal(err)
	}
	opened, err := proof.OpenCheckpoint(msg, vkey)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if opened.Origin != "anchordb/"+db.ID()+"/blake3" || opened.Anchors != 3 || opened.Records != 90 || opened.Root != cp.Root {
		t.Fatalf("checkpoint %+v", opened)
	}
	for _, e := range opened.Entries {
		root, size, err := db.AnchorRoot(ctx, e.Anchor, 0)
		if err != nil || size != e.Size || root != e.Root {
			t.Fatalf("entry %+v, engine says size %d root %s %v", e, size, root, err)
		}
	}
	stored, err := db.Checkpoints(ctx)
	if err != nil || len(stored) != 1 || !bytes.Equal(stored[0].Note, msg) || stored[0].Err != nil ||
		stored[0].Path != fs.PathJoin("db", CheckpointsDir, stored[0].Name) || !strings.HasPrefix(stored[0].Name, "0000000000000001-") {
		t.Fatalf("stored: %+v %v", stored, err)
	}

	// More appends, a second checkpoint: accepted, and listed after the first.
	appendN(t, db, anchors[:2], 40, "y")
	appendN(t, db, []string{"d"}, 3, "z")
	msg2, cp2, err := db.CreateCheckpoint(ctx, skey)
	if err != nil {
		t.Fatalf("second checkpoint: %v", err)
	}
	if err := proof.CheckConsistent(ctx, cp, cp2, consistencyProverOf(db)); err != nil {
		t.Fatalf("checkpoints not consistent: %v", err)
	}
	latest, err := db.LatestCheckpoint(ctx)
	if err != nil || latest == nil || !bytes.Equal(latest.Note, msg2) || !strings.HasPrefix(latest.Name, "0000000000000002-") {
		t.Fatalf("latest: %+v %v", latest, err)
	}
	// An equal checkpoint (nothing appended) is accepted too.
	if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
		t.Fatalf("third checkpoint: %v", err)
	}
	// Verify checks them all, with and without the key.
	for _, keys := range [][]string{nil, {vkey}} {
		if rep, err := db.Verify(ctx, VerifyOptions{VerifierKeys: keys}); err != nil || !rep.OK {
			t.Fatalf("verify with keys %v: %+v %v", keys, rep, err)
		}
	}
	_, otherKey, _ := proof.GenerateKeys("other")
	rep, err := db.Verify(ctx, VerifyOptions{VerifierKeys: []string{otherKey}})
	if err != nil || rep.OK || len(rep.Failures) != 3 || rep.Failures[0].Code != errs.CodeSignatureInvalid {
		t.Fatalf("verify with another key: %+v %v", rep, err)
	}
	// A bad key is refused before anything is stored.
	if _, _, err := db.CreateCheckpoint(ctx, "PRIVATE+KEY+nonsense"); errs.CodeOf(err) != errs.CodeInvalidInput {
		t.Fatalf("bad key: %v", err)
	}
	if all, _ := db.Checkpoints(ctx); len(all) != 3 {
		t.Fatalf("%d checkpoints stored", len(all))
	}
}

func consistencyProverOf(db *DB) proof.ConsistencyProver {
	return func(ctx context.Context, anchor string, oldSize, newSize uint64) ([][]byte, error) {
		p, err := db.ProveConsistency(ctx, anchor, oldSize, newSize)
		if err != nil {
			return nil, err
		}
		return raw(p.Proof), nil
	}
}

// TestCheckpointRefused: a new checkpoint that contradicts the latest stored
// one is refused and not stored.
func TestCheckpointRefused(t *testing.T) {
	ctx := context.Background()
	skey, vkey, _ := proof.GenerateKeys("k")
	setup := func(t *testing.T) (*DB, vfs.FS, StoredCheckpoint) {
		fs := vfs.NewMem()
		db := mustOpen(t, fs, memOpts(fs))
		t.Cleanup(func() { _ = db.Close() })
		appendN(t, db, []string{"a", "b"}, 20, "x")
		if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
			t.Fatal(err)
		}
		appendN(t, db, []string{"a", "b"}, 6, "y")
		latest, err := db.LatestCheckpoint(ctx)
		if err != nil || latest == nil {
			t.Fatal(latest, err)
		}
		return db, fs, *latest
	}
	refused := func(t *testing.T, db *DB, code errs.Code) {
		t.Helper()
		before, _ := db.Checkpoints(ctx)
		_, _, err := db.CreateCheckpoint(ctx, skey)
		if errs.CodeOf(err) != code {
			t.Fatalf("want %s, got %v", code, err)
		}
		if after, _ := db.Checkpoints(ctx); len(after) != len(before) {
			t.Fatalf("a refused checkpoint was stored")
		}
	}
	// The stored checkpoint, re-signed with the same key after changing an
	// anchor's root at the same size: a fork.
	resign := func(t *testing.T, fs vfs.FS, s StoredCheckpoint, edit func(*proof.Checkpoint)) {
		cp := *s.Checkpoint
		cp.Entries = slices.Clone(cp.Entries)
		edit(&cp)
		re, err := proof.NewCheckpoint(strings.TrimSuffix(strings.TrimPrefix(cp.Origin, "anchordb/"), "/blake3"), cp.Time, cp.Entries)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := proof.Sign(re.Marshal(), skey)
		if err != nil {
			t.Fatal(err)
		}
		testutil.WriteFile(fs, s.Path, msg)
	}
	t.Run("fork at the same size", func(t *testing.T) {
		db, fs, s := setup(t)
		resign(t, fs, s, func(cp *proof.Checkpoint) { cp.Entries[0].Root[3] ^= 1 })
		refused(t, db, errs.CodeConflict)
		wantFinding(t, db, errs.CodeHashMismatch, "a", 10, "checkpoint says")
	})
	t.Run("a tree that does not extend", func(t *testing.T) {
		db, fs, s := setup(t)
		resign(t, fs, s, func(cp *proof.Checkpoint) { cp.Entries[1].Size--; cp.Entries[1].Root[0] ^= 1 })
		refused(t, db, errs.CodeConflict)
	})
	t.Run("an anchor the database lost", func(t *testing.T) {
		db, fs, s := setup(t)
		resign(t, fs, s, func(cp *proof.Checkpoint) {
			cp.Entries = append(cp.Entries, proof.Entry{Anchor: "zz", Size: 1, Root: segment.Hash{9}})
		})
		refused(t, db, errs.CodeConflict)
		wantFinding(t, db, errs.CodeChainBroken, "zz", 1, "does not have it")
	})
	t.Run("signature altered", func(t *testing.T) {
		db, fs, s := setup(t)
		i := bytes.Index(s.Note, []byte("\ntime ")) + 8
		bad := slices.Clone(s.Note)
		bad[i] = '1' + (bad[i]-'0'+1)%9 // another year, still a valid body
		testutil.WriteFile(fs, s.Path, bad)
		refused(t, db, errs.CodeSignatureInvalid)
		rep, err := db.Verify(ctx, VerifyOptions{VerifierKeys: []string{vkey}})
		if err != nil || rep.OK || rep.Failures[0].Code != errs.CodeSignatureInvalid || rep.Failures[0].File != s.Path {
			t.Fatalf("verify: %+v %v", rep, err)
		}
	})
	t.Run("not a checkpoint", func(t *testing.T) {
		db, fs, s := setup(t)
		testutil.WriteFile(fs, s.Path, []byte("hello\n"))
		refused(t, db, errs.CodeConflict)
	})
	t.Run("another database's checkpoint", func(t *testing.T) {
		db, fs, s := setup(t)
		other := mustOpen(t, vfs.NewMem(), memOpts(nil))
		defer other.Close()
		appendN(t, other, []string{"a", "b"}, 20, "x")
		msg, _, err := other.CreateCheckpoint(ctx, skey)
		if err != nil {
			t.Fatal(err)
		}
		testutil.WriteFile(fs, s.Path, msg)
		refused(t, db, errs.CodeConflict)
	})
	t.Run("history rewritten under the same id", func(t *testing.T) {
		// A database with the same id whose logs say other things: its
		// checkpoint cannot extend the stored one.
		db, fs, s := setup(t)
		fs2 := vfs.NewMem()
		twin := mustOpen(t, fs2, memOpts(fs2))
		if err := twin.Close(); err != nil {
			t.Fatal(err)
		}
		testutil.WriteFile(fs2, fs2.PathJoin("db", IDFile), []byte(db.ID()+"\n"))
		twin = mustOpen(t, fs2, memOpts(fs2))
		defer twin.Close()
		if twin.ID() != db.ID() {
			t.Fatalf("twin id %s", twin.ID())
		}
		appendN(t, twin, []string{"a", "b"}, 30, "other")
		dir := fs2.PathJoin("db", CheckpointsDir)
		if err := fs2.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		testutil.WriteFile(fs2, fs2.PathJoin(dir, s.Name), s.Note)
		refused(t, twin, errs.CodeConflict)
		_ = fs
	})
}

// TestVerifyFrom: an incremental check from a trusted checkpoint checks only
// the records after it, and the trusted roots against the index's trees.
func TestVerifyFrom(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, memOpts(fs))
	defer func() { _ = db.Close() }()
	skey, vkey, _ := proof.GenerateKeys("k")
	anchors := []string{"a", "b", "c"}
	appendN(t, db, anchors, 300, "x")
	msg, _, err := db.CreateCheckpoint(ctx, skey)
	if err != nil {
		t.Fatal(err)
	}
	from, err := proof.OpenCheckpoint(msg, vkey)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, db, anchors[:2], 60, "y")
	appendN(t, db, []string{"d"}, 5, "z")
	rep, err := db.Verify(ctx, VerifyOptions{From: from})
	if err != nil || !rep.OK || rep.Records != 65 || rep.Anchors != 4 {
		t.Fatalf("incremental: %+v %v", rep, err)
	}
	// Damage before the trusted size is not looked at; after it, it is.
	if err := db.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	e, _, _ := db.location("a", 10)
	path := fs.PathJoin(segment.AnchorDir(fs, "db", "a"), segment.FileName(e.Segno))
	orig, _ := testutil.ReadFile(fs, path)
	d := slices.Clone(orig)
	d[e.Offset+int64(e.Size)-1] ^= 1
	testutil.WriteFile(fs, path, d)
	if rep, err := db.Verify(ctx, VerifyOptions{From: from}); err != nil || !rep.OK {
		t.Fatalf("incremental sees old damage: %+v %v", rep, err)
	}
	wantFinding(t, db, errs.CodeHashMismatch, "a", 10, "stored hash")
	testutil.WriteFile(fs, path, orig)
	db = operatorRepair(t, db, fs, memOpts(fs))
	e, _, _ = db.location("b", 110)
	path = fs.PathJoin(segment.AnchorDir(fs, "db", "b"), segment.FileName(e.Segno))
	orig, _ = testutil.ReadFile(fs, path)
	d = slices.Clone(orig)
	d[e.Offset+40] ^= 1
	testutil.WriteFile(fs, path, d)
	rep, err = db.Verify(ctx, VerifyOptions{From: from})
	if err != nil || rep.OK || rep.Failures[0].Code != errs.CodeHashMismatch || rep.Failures[0].Seq != 110 || rep.Failures[0].Offset != e.Offset {
		t.Fatalf("incremental misses new damage: %+v %v", rep, err)
	}
	testutil.WriteFile(fs, path, orig)
	db = operatorRepair(t, db, fs, memOpts(fs))
	// A trusted root the index cannot show: reported, and the anchor is
	// checked in full.
	forged := *from
	forged.Entries = slices.Clone(from.Entries)
	forged.Entries[2].Root[0] ^= 1
	re, _ := proof.NewCheckpoint(db.ID(), forged.Time, forged.Entries)
	rep, err = db.Verify(ctx, VerifyOptions{From: re})
	if err != nil || rep.OK || rep.Records != 65+100 {
		t.Fatalf("forged root: %+v %v", rep, err)
	}
	found := 0
	for _, f := range rep.Failures {
		if f.Anchor == "c" && f.Code == errs.CodeHashMismatch {
			found++
		}
	}
	if found == 0 {
		t.Fatalf("forged root not reported: %+v", rep.Failures)
	}
	// A checkpoint of another database is refused.
	other, _ := proof.NewCheckpoint("someone-else", time.Now(), from.Entries)
	if _, err := db.Verify(ctx, VerifyOptions{From: other}); errs.CodeOf(err) != errs.CodeInvalidInput {
		t.Fatalf("foreign checkpoint: %v", err)
	}
}

// TestVerifyCheckpointNamesWithoutAKey: with no verifier key, verify still
// sees a stored checkpoint deleted from the middle of the sequence (INT_002)
// and a body whose time line was edited after signing (AUTH_003): each
// file's name records its place and time. Removing the oldest ones is
// allowed.
func TestVerifyCheckpointNamesWithoutAKey(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, memOpts(fs))
	defer func() { _ = db.Close() }()
	skey, _, err := proof.GenerateKeys("k")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		appendN(t, db, []string{"a", "b"}, 10, fmt.Sprint("r", i))
		if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
			t.Fatal(err)
		}
	}
	findings := func() []Finding {
		t.Helper()
		rep, err := db.Verify(ctx, VerifyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return rep.Failures
	}
	if f := findings(); len(f) != 0 {
		t.Fatalf("verify of untouched checkpoints: %v", f)
	}
	stored, err := db.Checkpoints(ctx)
	if err != nil || len(stored) != 5 {
		t.Fatalf("stored: %d %v", len(stored), err)
	}
	// The oldest removed: a pruned sequence, not a finding.
	if err := fs.Remove(stored[0].Path); err != nil {
		t.Fatal(err)
	}
	if f := findings(); len(f) != 0 {
		t.Fatalf("verify after the oldest checkpoint was removed: %v", f)
	}
	// One from the middle removed.
	if err := fs.Remove(stored[2].Path); err != nil {
		t.Fatal(err)
	}
	f := findings()
	if len(f) != 1 || f[0].Code != errs.CodeChainBroken || f[0].File != stored[3].Path || !strings.Contains(f[0].Message, "3 to 3 are missing") {
		t.Fatalf("verify after checkpoint 3 was removed: %v", f)
	}
	testutil.WriteFile(fs, stored[2].Path, stored[2].Note)
	// A time line edited (the rest of the body, and the roots, unchanged).
	old := "time " + stored[4].Checkpoint.Time.Format(time.RFC3339Nano)
	edited := "time " + stored[4].Checkpoint.Time.Add(-time.Hour).Format(time.RFC3339Nano)
	if !bytes.Contains(stored[4].Note, []byte(old)) {
		t.Fatalf("no %q line in %s", old, stored[4].Note)
	}
	testutil.WriteFile(fs, stored[4].Path, bytes.Replace(stored[4].Note, []byte(old), []byte(edited), 1))
	f = findings()
	if len(f) != 1 || f[0].Code != errs.CodeSignatureInvalid || f[0].File != stored[4].Path || !strings.Contains(f[0].Message, "changed after it was signed") {
		t.Fatalf("verify after a time line was edited: %v", f)
	}
}
