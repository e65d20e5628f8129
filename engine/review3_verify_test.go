package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// codeTextRE matches the "CODE reason" a coded error prints before its
// message. A finding carries its code and reason in fields of their own
// (SPEC §10), so its message must not repeat one.
var codeTextRE = regexp.MustCompile(`\b[A-Z]+_[0-9]{3} [a-z_]+\b`)

// checkFindingMessages fails the test for a finding whose message holds a
// code's text.
func checkFindingMessages(t *testing.T, rep VerifyReport) {
	t.Helper()
	for _, f := range rep.Failures {
		if m := codeTextRE.FindString(f.Message); m != "" {
			t.Errorf("finding %s at %s offset %d: the message repeats the code text %q: %q", f.Code, f.File, f.Offset, m, f.Message)
		}
	}
}

// TestReview3VerifySnapshotFindingKeepsOffset: a damaged snapshot's finding
// carries the byte offset the snapshot reader located the damage at, as
// VerifySnapshot reports it, and a message without the code's text.
func TestReview3VerifySnapshotFindingKeepsOffset(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{FS: fs})
	defer db.Close()
	for i := 0; i < 50; i++ {
		if _, err := db.Put(ctx, fmt.Sprintf("a%d", i%3), []byte(fmt.Sprintf("k%d", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	info, err := db.CreateSnapshot(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := fs.UnsafeGetFileDataBuffer(info.Path)
	data[len(data)/2] ^= 1
	_, verr := db.VerifySnapshot(ctx, info.Path)
	var want *errs.Error
	if !errors.As(verr, &want) || want.Code != errs.CodeSnapshotCorrupted || want.Offset == 0 {
		t.Fatalf("VerifySnapshot of the damaged file: %v; want INT_003 located at a non-zero offset", verr)
	}
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil || rep.OK || len(rep.Failures) != 1 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	f := rep.Failures[0]
	if f.Code != errs.CodeSnapshotCorrupted || f.File != info.Path || f.Offset != want.Offset {
		t.Errorf("finding %s %s offset %d; want INT_003 %s offset %d", f.Code, f.File, f.Offset, info.Path, want.Offset)
	}
	if ferr := f.Err(); ferr.Offset != want.Offset || !errors.Is(ferr, ErrSnapshotCorrupted) {
		t.Errorf("finding as an error: %v offset %d", ferr, ferr.Offset)
	}
	checkFindingMessages(t, rep)
}

// TestReview3VerifyFindingMessagesHaveNoCode: findings built from a coded
// error (a stored checkpoint that fails its signature or contradicts the
// one before it, the audit log) keep that error's message but not its
// "CODE reason" text, which the finding carries in its own fields.
func TestReview3VerifyFindingMessagesHaveNoCode(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{FS: fs})
	defer db.Close()
	vkey := putsUnderCheckpoints(t, db, 4)
	if _, err := db.CreateSnapshot(ctx, ""); err != nil {
		t.Fatal(err)
	}
	stored, err := db.Checkpoints(ctx)
	if err != nil || len(stored) != 4 {
		t.Fatalf("checkpoints: %d %v", len(stored), err)
	}
	// A signature byte flipped: AUTH_003 with a verifier key.
	sig, _ := fs.UnsafeGetFileDataBuffer(stored[1].Path)
	sig[len(sig)-20] = otherBase64(sig[len(sig)-20])
	// The audit log's last line damaged.
	audit, _ := fs.UnsafeGetFileDataBuffer(db.AuditPath())
	audit[len(audit)-10] ^= 1

	rep, err := db.Verify(ctx, VerifyOptions{VerifierKeys: []string{vkey}})
	if err != nil || rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	codes := map[errs.Code]bool{}
	for _, f := range rep.Failures {
		codes[f.Code] = true
	}
	if !codes[errs.CodeSignatureInvalid] || len(codes) < 2 {
		t.Fatalf("findings %+v; want AUTH_003 for the checkpoint and one for the audit log", rep.Failures)
	}
	checkFindingMessages(t, rep)
}

// otherBase64 returns a base64 character other than c, so that a signature
// changed with it still decodes, to other bytes.
func otherBase64(c byte) byte {
	if c == 'A' {
		return 'B'
	}
	return 'A'
}

// TestReview3VerifyStoredCheckpointSignatureRespelled: a stored
// checkpoint whose signature line was changed in a way the note package's
// lenient base64 decoding does not see (the unused low bits of its last
// character) is an AUTH_003 finding when verify is given the key.
func TestReview3VerifyStoredCheckpointSignatureRespelled(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{FS: fs})
	defer db.Close()
	skey, vkey, err := proof.GenerateKeys("k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
		t.Fatal(err)
	}
	stored, err := db.Checkpoints(ctx)
	if err != nil || len(stored) != 1 {
		t.Fatalf("checkpoints: %d %v", len(stored), err)
	}
	data, _ := fs.UnsafeGetFileDataBuffer(stored[0].Path)
	// "…<last data character>=\n": 68 bytes of key hash and signature.
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	at := len(data) - 3
	data[at] = alphabet[strings.IndexByte(alphabet, data[at])^1]
	rep, err := db.Verify(ctx, VerifyOptions{VerifierKeys: []string{vkey}})
	if err != nil || rep.OK || len(rep.Failures) != 1 || rep.Failures[0].Code != errs.CodeSignatureInvalid || rep.Failures[0].File != stored[0].Path {
		t.Fatalf("verify of a re-spelled signature: %+v %v; want one AUTH_003 finding", rep, err)
	}
	checkFindingMessages(t, rep)
	// And a new checkpoint cannot be made on top of it.
	if _, _, err := db.CreateCheckpoint(ctx, skey); !errors.Is(err, ErrSignatureInvalid) {
		t.Fatalf("checkpoint over a re-spelled one: %v, want AUTH_003", err)
	}
}

// TestReview3VerifyMissingAuditedSnapshot: a snapshot the audit log
// records as created, and not as removed, whose file is gone is an INT_003
// finding. Only a compaction removes a snapshot, and it audits the removal
// first; a file gone otherwise is lost or deleted by hand — after a
// truncation, with it the only copy of the state below the cut — and
// verify said nothing.
func TestReview3VerifyMissingAuditedSnapshot(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, _ := compactFixture(t, fs)
	defer db.Close()
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	list, err := db.Snapshots(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("snapshots: %+v %v", list, err)
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("before: %+v %v", rep, err)
	}
	if err := fs.Remove(list[0].Path); err != nil {
		t.Fatal(err)
	}
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil || rep.OK || len(rep.Failures) != 1 {
		t.Fatalf("verify without the snapshot the log was cut below: %+v %v; want one INT_003 finding", rep, err)
	}
	f := rep.Failures[0]
	if f.Code != errs.CodeSnapshotCorrupted || f.File != list[0].Path || !strings.Contains(f.Message, list[0].Name) {
		t.Errorf("finding %+v; want INT_003 naming %s", f, list[0].Path)
	}
	checkFindingMessages(t, rep)
	// SkipSnapshots leaves it out, as it leaves out the files.
	if rep, err := db.Verify(ctx, VerifyOptions{SkipSnapshots: true}); err != nil || !rep.OK {
		t.Fatalf("SkipSnapshots: %+v %v", rep, err)
	}
}

// rewriteSnapshot writes a snapshot with s's frontier and entries, the
// value of key changed, into the snapshots directory, removes s and
// returns the new one: well-formed, hashes recomputed, another name.
func rewriteSnapshot(t *testing.T, fs vfs.FS, db *DB, s snapshot.Info, key []byte) snapshot.Info {
	t.Helper()
	r, err := snapshot.Open(fs, s.Path)
	if err != nil {
		t.Fatal(err)
	}
	var entries []snapshot.Entry
	changed := false
	for e, err := range r.Entries() {
		if err != nil {
			t.Fatal(err)
		}
		e = e.Clone()
		if bytes.Equal(e.Key, key) {
			e.Value, changed = []byte("FORGED"), true
		}
		entries = append(entries, e)
	}
	_ = r.Close()
	if !changed {
		t.Fatalf("snapshot %s has no key %q", s.Name, key)
	}
	forged, err := snapshot.Create(fs, db.SnapshotsDir(), snapshot.Meta{Frontier: s.Frontier, PolicyRef: s.PolicyRef, Created: s.Created},
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
	if err := snapshot.Delete(fs, s.Path); err != nil {
		t.Fatal(err)
	}
	return forged
}

// TestReview3SnapshotVerifyHoldsUnreplayableToAuditLog: VerifySnapshot
// (snapshot verify) of a snapshot it cannot prove by replay — the log below
// it truncated, no older snapshot to start from — said ok ("the file and
// its state hash verify") for a rewrite with another value: those hashes
// are unkeyed. Like verify, it now requires the audit log's record of the
// snapshot's creation, with the same file and state hashes (INT_003
// otherwise). And a base a replay starts from must be so recorded: a pair
// of rewrites, the newer replayed from the older, proved each other.
func TestReview3SnapshotVerifyHoldsUnreplayableToAuditLog(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, _ := compactFixture(t, fs)
	defer db.Close()
	// Two compactions: the first snapshot s1 is below the cut, which no
	// older snapshot covers; the second, s2, replays from it.
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	fillAnchor(t, db, "a1", 30, "late")
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	list, err := db.Snapshots(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("snapshots: %d %v", len(list), err)
	}
	s1, s2 := list[0], list[1]
	if v, err := db.VerifySnapshot(ctx, s1.Path); err != nil || v.Replayed {
		t.Fatalf("the scenario needs a snapshot the log cannot replay: %+v %v", v, err)
	}
	if v, err := db.VerifySnapshot(ctx, s2.Path); err != nil || !v.Replayed || v.Base != s1.Name {
		t.Fatalf("the scenario needs a snapshot replayed from %s: %+v %v", s1.Name, v, err)
	}
	// A key of the fixture's, which fillAnchor does not write.
	key := []byte("k001")

	f1 := rewriteSnapshot(t, fs, db, s1, key)
	_, err = db.VerifySnapshot(ctx, f1.Path)
	var e *errs.Error
	if !errors.As(err, &e) || e.Code != errs.CodeSnapshotCorrupted || e.File != f1.Path {
		t.Fatalf("VerifySnapshot of a rewritten snapshot the log cannot replay: %v; want INT_003 naming %s", err, f1.Path)
	}
	// The genuine s2 is not replayed from the rewrite (nor blamed for it):
	// without a base the audit log vouches for, it is held to its own
	// record, which it matches.
	if v, err := db.VerifySnapshot(ctx, s2.Path); err != nil || v.Base == f1.Name {
		t.Fatalf("VerifySnapshot of %s with a rewritten base beside it: %+v %v", s2.Name, v, err)
	}
	f2 := rewriteSnapshot(t, fs, db, s2, key)
	if v, err := db.VerifySnapshot(ctx, f2.Path); err == nil {
		t.Fatalf("a rewritten snapshot proves from the rewritten base %q: %+v", v.Base, v)
	}
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil || rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	bad := map[string]bool{}
	for _, f := range rep.Failures {
		if f.Code != errs.CodeSnapshotCorrupted {
			t.Errorf("finding %+v; want INT_003 only", f)
		}
		bad[f.File] = true
	}
	for _, p := range []string{f1.Path, f2.Path, s1.Path, s2.Path} {
		if !bad[p] {
			t.Errorf("no finding for %s: %+v", p, rep.Failures)
		}
	}
	checkFindingMessages(t, rep)
}

// TestReview3VerifyMalformedAuditHeadRow: the index's record of the audit
// log's head is what tells a lost or altered last line from a torn append.
// A malformed row was taken as no row at all, so with it damaged the last
// line of the log could go and verify said ok. It is INT_004 now, as a
// malformed meta row is elsewhere.
func TestReview3VerifyMalformedAuditHeadRow(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{FS: fs})
	defer db.Close()
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateSnapshot(ctx, ""); err != nil {
		t.Fatal(err)
	}
	row, ok, err := db.metaBytes(schema.MetaAudit)
	if err != nil || !ok {
		t.Fatalf("no audit head row: %v", err)
	}
	if err := db.index.Set(schema.MetaKey(schema.MetaAudit), row[:8], pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil || rep.OK || len(rep.Failures) != 1 || rep.Failures[0].Code != errs.CodeIndexMismatch || rep.Failures[0].File != db.AuditPath() {
		t.Fatalf("verify with a malformed audit head row: %+v %v; want one INT_004 finding for the audit log", rep, err)
	}
	checkFindingMessages(t, rep)
}

// TestReview3VerifyDeferredRowMessages: a 'k' row a rebuild from a
// snapshot wrote, whose record is damaged, is reported with the record's
// problem in words, not with the code of the error that carried it (the
// finding has its own).
func TestReview3VerifyDeferredRowMessages(t *testing.T) {
	ctx := context.Background()
	db, rows := deferredFixture(t)
	mem, ok := db.fs.(*vfs.MemFS)
	if !ok {
		t.Skipf("the fixture's filesystem is a %T", db.fs)
	}
	ve, err := schema.DecodeVersion(rows["a1"][0][1])
	if err != nil {
		t.Fatal(err)
	}
	row, ok, err := db.location("a1", ve.Seq)
	if err != nil || !ok || row.Size == 0 {
		t.Fatalf("'s' row of a1 seq %d: %+v %v %v", ve.Seq, row, ok, err)
	}
	data, err := mem.UnsafeGetFileDataBuffer(db.fs.PathJoin(segment.AnchorDir(db.fs, "db", "a1"), segment.FileName(row.Segno)))
	if err != nil {
		t.Fatal(err)
	}
	data[row.Offset+int64(row.Size)/2] ^= 1
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil || rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	found := false
	for _, f := range rep.Failures {
		found = found || strings.Contains(f.Message, "cannot be read")
	}
	if !found {
		t.Fatalf("no finding for the deferred row of seq %d: %+v", ve.Seq, rep.Failures)
	}
	checkFindingMessages(t, rep)
}

// TestReview3VerifyReplayedStoredCheckpoint: the database numbers the
// checkpoints it stores 1, 2, 3, …, each once. A genuine older checkpoint
// copied in under a number already taken (its own time in the name, so it
// sorts before the checkpoint it doubles) extended the one before it and
// was extended by the one after, and verify said ok. A number that appears
// twice is INT_002 now; a copy under the next number was already caught,
// as a shrink.
func TestReview3VerifyReplayedStoredCheckpoint(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{FS: fs})
	defer db.Close()
	vkey := putsUnderCheckpoints(t, db, 2)
	stored, err := db.Checkpoints(ctx)
	if err != nil || len(stored) != 2 {
		t.Fatalf("checkpoints: %d %v", len(stored), err)
	}
	first := stored[0]
	_, stamp, _ := strings.Cut(first.Name, "-")
	for _, tc := range []struct {
		name string
		seq  int
	}{{"under a number taken", 2}, {"under the next number", 3}} {
		t.Run(tc.name, func(t *testing.T) {
			path := fs.PathJoin(db.dir, CheckpointsDir, fmt.Sprintf("%016d-%s", tc.seq, stamp))
			if err := writeFileAtomic(fs, fs.PathJoin(db.dir, CheckpointsDir), fs.PathBase(path), first.Note); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = fs.Remove(path) }()
			rep, err := db.Verify(ctx, VerifyOptions{VerifierKeys: []string{vkey}})
			if err != nil || rep.OK {
				t.Fatalf("verify with checkpoint 1 copied in as %d: %+v %v", tc.seq, rep, err)
			}
			for _, f := range rep.Failures {
				if f.Code != errs.CodeChainBroken {
					t.Errorf("finding %+v; want INT_002", f)
				}
			}
			checkFindingMessages(t, rep)
		})
	}
}

// TestReview3VerifyAuditLinesPastTheHead: a line appended to the audit
// log by anyone but the database (the chain has no key: anyone can extend
// it) is past the head the index recorded. It vouches for nothing and the
// database refuses to append after it (INT_002), yet verify said ok. It is
// an INT_002 finding now, naming the first such line; a line the database
// was about to write when it stopped (its index recorded it as next) is
// not.
func TestReview3VerifyAuditLinesPastTheHead(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{FS: fs})
	defer db.Close()
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	info, err := db.CreateSnapshot(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("before: %+v %v", rep, err)
	}
	line, err := snapshot.Append(fs, db.AuditPath(), snapshot.AuditEntry{Time: time.Now(), Action: string(snapshot.ActionDeleteSnapshot),
		Removed: []snapshot.AuditItem{snapshot.SnapshotItem(info)}, Note: "not by the database"})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil || rep.OK || len(rep.Failures) != 1 {
		t.Fatalf("verify with a line appended past the head: %+v %v; want one INT_002 finding", rep, err)
	}
	if f := rep.Failures[0]; f.Code != errs.CodeChainBroken || f.File != db.AuditPath() || f.Seq != line.Seq {
		t.Errorf("finding %+v; want INT_002 at line %d of %s", f, line.Seq, db.AuditPath())
	}
	checkFindingMessages(t, rep)
	// The database's own next line, written before its head row was: the
	// index recorded it as next, which vouches for it.
	if err := db.index.Set(schema.MetaKey(schema.MetaAuditNext), schema.AppendAuditHead(nil, line.Seq, line.Hash), pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("verify with the line the index recorded as next: %+v %v", rep, err)
	}
}

// putsUnderCheckpoints makes n puts to anchor "a" (keys k0, k1, …), each
// followed by a checkpoint signed with a new key, and returns the key's
// verifier.
func putsUnderCheckpoints(t *testing.T, db *DB, n int) string {
	t.Helper()
	ctx := context.Background()
	skey, vkey, err := proof.GenerateKeys("k")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := db.Put(ctx, "a", []byte(fmt.Sprint("k", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
		if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
			t.Fatal(err)
		}
	}
	return vkey
}
