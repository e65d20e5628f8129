package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/zeebo/blake3"
)

// ckptTrustFixture is a database whose anchor "a" holds 310 records over
// many sealed segments, one snapshot (at 300) the audit log records, and one
// checkpoint the database signed at signedAt records: a truncating
// compaction may cut "a" up to signedAt and no further.
func ckptTrustFixture(t *testing.T, fs vfs.FS) (db *DB, genuine StoredCheckpoint) {
	t.Helper()
	ctx := context.Background()
	db = mustOpen(t, fs, Options{SegmentSize: 4096, InlineValueMax: 64})
	fillAnchor(t, db, "a", ckptSignedAt, "x")
	skey, _ := coverKeys(t)
	if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
		t.Fatal(err)
	}
	fillAnchor(t, db, "a", 200, "y")
	if _, err := db.Compact(ctx, truncatePolicy, CompactOptions{Apply: true}); err != nil { // the snapshot
		t.Fatal(err)
	}
	fillAnchor(t, db, "a", 10, "z")
	all, err := db.Checkpoints(ctx)
	if err != nil || len(all) != 1 || all[0].Err != nil {
		t.Fatalf("checkpoints: %+v %v", all, err)
	}
	return db, all[0]
}

// ckptSignedAt is the size of "a" ckptTrustFixture's genuine checkpoint signs.
const ckptSignedAt = 100

// headCheckpointBody is a well-formed checkpoint body of this database at
// every anchor's head, each with its true root: what anyone who can read the
// log can compute.
func headCheckpointBody(t *testing.T, db *DB, at time.Time) *proof.Checkpoint {
	t.Helper()
	ctx := context.Background()
	var entries []proof.Entry
	for info, err := range db.Anchors(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		root, _, err := db.AnchorRoot(ctx, info.ID, info.Records)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, proof.Entry{Anchor: info.ID, Size: info.Records, Root: root})
	}
	cp, err := proof.NewCheckpoint(db.id, at, entries)
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// signatures returns the signature block of a signed note (after its blank
// line).
func signatures(msg []byte) []byte { return msg[bytes.LastIndex(msg, []byte("\n\n"))+2:] }

// storedName is the name CreateCheckpoint gives checkpoint seq taken at t.
func storedName(seq uint64, t time.Time) string {
	return fmt.Sprintf("%016d-%s%s", seq, t.UTC().Format(checkpointTimeLayout), checkpointExt)
}

// A file in checkpoints/ that the database did not store there steers no
// cut. Before the fix compaction took the newest well-formed note of this
// database's origin whose roots were the log's, without any signature
// check: anyone who could write checkpoints/ (or restore a file there)
// moved the cut past the checkpoint the database signed — removing, with
// their bytes, records no signed root had ever covered — or held it below.
// Each file here is named as the database would name its next checkpoint,
// so its name, time, origin, roots and consistency with the one before all
// pass verify without keys.
func TestUnvouchedCheckpointSteersNoCut(t *testing.T) {
	at := time.Date(2026, 11, 27, 7, 0, 0, 0, time.UTC)
	foreignKey, _, err := proof.GenerateKeys("someone.else/anchordb")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		// note returns the file's name and bytes.
		note func(t *testing.T, db *DB, genuine StoredCheckpoint) (string, []byte)
	}{
		{"unsigned, at the head", func(t *testing.T, db *DB, _ StoredCheckpoint) (string, []byte) {
			return storedName(2, at), append(headCheckpointBody(t, db, at).Marshal(), '\n')
		}},
		{"signed by another key, at the head", func(t *testing.T, db *DB, _ StoredCheckpoint) (string, []byte) {
			msg, err := proof.Sign(headCheckpointBody(t, db, at).Marshal(), foreignKey)
			if err != nil {
				t.Fatal(err)
			}
			return storedName(2, at), msg
		}},
		{"the database's signature over another body", func(t *testing.T, db *DB, g StoredCheckpoint) (string, []byte) {
			body := headCheckpointBody(t, db, at).Marshal()
			return storedName(2, at), append(append(body, '\n'), signatures(g.Note)...)
		}},
		{"right origin, roots that are not the log's", func(t *testing.T, db *DB, _ StoredCheckpoint) (string, []byte) {
			cp := headCheckpointBody(t, db, at)
			for i := range cp.Entries {
				cp.Entries[i].Root = segment.Hash{1, 2, 3}
			}
			cp, err := proof.NewCheckpoint(db.id, at, cp.Entries)
			if err != nil {
				t.Fatal(err)
			}
			msg, err := proof.Sign(cp.Marshal(), foreignKey)
			if err != nil {
				t.Fatal(err)
			}
			return storedName(2, at), msg
		}},
		{"a copy of the database's own under the next number", func(t *testing.T, _ *DB, g StoredCheckpoint) (string, []byte) {
			return storedName(2, g.Checkpoint.Time), g.Note
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			fs := vfs.NewMem()
			db, genuine := ckptTrustFixture(t, fs)
			defer db.Close()
			name, msg := tc.note(t, db, genuine)
			path := fs.PathJoin("db", CheckpointsDir, name)
			writeAll(t, fs, path, msg)

			res, err := db.Compact(ctx, truncatePolicy, CompactOptions{Apply: true})
			if err != nil {
				t.Fatal(err)
			}
			var removed int
			for _, a := range res.Plan.Actions {
				if a.Kind == snapshot.ActionRemoveSegment {
					removed++
					if a.LastSeq > ckptSignedAt {
						t.Errorf("segment %d (seqs %d..%d) removed: the checkpoint the database signed covers %d records", a.Segno, a.FirstSeq, a.LastSeq, ckptSignedAt)
					}
				}
			}
			if removed == 0 {
				t.Errorf("nothing removed: the checkpoint the database signed covers %d records; plan:\n%s", ckptSignedAt, res.Plan)
			}
			segs, err := db.sealedSegments("a", mustAnchor(t, db, "a").Segments)
			if err != nil {
				t.Fatal(err)
			}
			if len(segs) == 0 || segs[0].FirstSeq > ckptSignedAt+1 {
				t.Errorf("the log of \"a\" now starts at seq %v: records above the %d the database signed are gone", segs, ckptSignedAt)
			}
			if !strings.Contains(strings.Join(res.Plan.Notes, "\n"), name) {
				t.Errorf("the plan does not name %s; notes:\n%s", name, strings.Join(res.Plan.Notes, "\n"))
			}
			if got, err := readWhole(fs, path); err != nil || !bytes.Equal(got, msg) {
				t.Errorf("the file was changed or removed: %v", err)
			}
			checkGenuineStillHolds(t, db, genuine, path, tc.name == "a copy of the database's own under the next number")
		})
	}
}

// checkGenuineStillHolds checks, after a truncation under the checkpoint the
// database signed, that what it signs is still proved (a removed record's
// inclusion at its size, and the consistency from it to the head, both
// bound to it) and that verify with its key finds the foreign file at path
// and nothing else — nothing when the file is a faithful copy.
func checkGenuineStillHolds(t *testing.T, db *DB, genuine StoredCheckpoint, path string, faithful bool) {
	t.Helper()
	ctx := context.Background()
	_, vkey := coverKeys(t)
	cp, err := proof.OpenCheckpoint(genuine.Note, vkey)
	if err != nil {
		t.Fatal(err)
	}
	inc, err := db.ProveInclusion(ctx, "a", 50, ckptSignedAt)
	if err == nil {
		err = proof.VerifyInclusionProof(inc)
	}
	if err == nil {
		err = cp.Bind(proof.Verified{Inclusion: inc})
	}
	if err != nil {
		t.Errorf("inclusion of a removed record in the signed tree: %v", err)
	}
	head := mustAnchor(t, db, "a").Records
	cons, err := db.ProveConsistency(ctx, "a", ckptSignedAt, head)
	if err == nil {
		err = proof.VerifyConsistencyProof(cons)
	}
	if err == nil {
		err = cp.Bind(proof.Verified{Consistency: cons})
	}
	if err != nil {
		t.Errorf("consistency from the signed tree to the head: %v", err)
	}
	rep, err := db.Verify(ctx, VerifyOptions{VerifierKeys: []string{vkey}})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Failures {
		if f.File != path {
			t.Errorf("verify finding beside the foreign file: %s %s: %s", f.Code, f.File, f.Message)
		}
	}
	if faithful != rep.OK {
		t.Errorf("verify with the database's key: ok=%v, want %v; %+v", rep.OK, faithful, rep.Failures)
	}
}

// mustAnchor returns the anchor's info.
func mustAnchor(t *testing.T, db *DB, id string) AnchorInfo {
	t.Helper()
	for info, err := range db.Anchors(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		if info.ID == id {
			return info
		}
	}
	t.Fatalf("no anchor %q", id)
	return AnchorInfo{}
}

// A checkpoint stored before checkpoints were audited — here one signed
// with the database's own key and put in place as CreateCheckpoint would
// have — bounds no cut: without a key nothing tells it from a forgery. The
// plan names each (the newest few one by one, the rest in one note) and
// says what lifts the bound; the next CreateCheckpoint, recorded in the
// audit log, does.
func TestUnauditedCheckpointWaitsForTheNext(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, _ := ckptTrustFixture(t, fs)
	defer db.Close()
	skey, _ := coverKeys(t)
	const legacy = maxCheckpointNotes + 2
	var names []string
	for i := range legacy {
		at := time.Date(2026, 11, 27, 7, 0, i, 0, time.UTC)
		msg, err := proof.Sign(headCheckpointBody(t, db, at).Marshal(), skey)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, storedName(uint64(2+i), at))
		writeAll(t, fs, fs.PathJoin("db", CheckpointsDir, names[i]), msg)
	}

	res, err := db.Compact(ctx, truncatePolicy, CompactOptions{Apply: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range res.Plan.Actions {
		if a.Kind == snapshot.ActionRemoveSegment && a.LastSeq > ckptSignedAt {
			t.Errorf("segment %d (seqs %d..%d) removed under checkpoints the audit log does not record", a.Segno, a.FirstSeq, a.LastSeq)
		}
	}
	notes := strings.Join(res.Plan.Notes, "\n")
	for _, n := range names[legacy-maxCheckpointNotes:] {
		if !strings.Contains(notes, "checkpoint "+n+" is one the audit log does not record") {
			t.Errorf("the plan does not name %s; notes:\n%s", n, notes)
		}
	}
	if want := fmt.Sprintf("%d older files in %s (%s to %s)", legacy-maxCheckpointNotes, CheckpointsDir, names[0], names[legacy-maxCheckpointNotes-1]); !strings.Contains(notes, want) {
		t.Errorf("the plan does not count the older ones (%q); notes:\n%s", want, notes)
	}

	// Where nothing is cut, checkpoints steer nothing: the plan does not
	// speak of them.
	forever := truncatePolicy
	forever.RawLog = snapshot.RawLogForever
	dry, err := db.Compact(ctx, forever, CompactOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if notes := strings.Join(dry.Plan.Notes, "\n"); strings.Contains(notes, CheckpointsDir) || strings.Contains(notes, "checkpoint 0") {
		t.Errorf("a plan with raw_log %q names checkpoints:\n%s", forever.RawLog, notes)
	}

	// The next checkpoint extends them (same key) and is recorded: the cut
	// goes up to the kept snapshot.
	if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
		t.Fatal(err)
	}
	res, err = db.Compact(ctx, truncatePolicy, CompactOptions{Apply: true})
	if err != nil {
		t.Fatal(err)
	}
	var top uint64
	for _, a := range res.Plan.Actions {
		if a.Kind == snapshot.ActionRemoveSegment {
			top = max(top, a.LastSeq)
		}
	}
	if top <= ckptSignedAt {
		t.Fatalf("after a recorded checkpoint at the head the cut stays at %d; plan:\n%s", top, res.Plan)
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("verify: %v %+v", err, rep.Failures)
	}
}

// CreateCheckpoint records what it stores in the audit log, name and hash
// of the bytes; when the audit log cannot take the line the file is removed
// again and nothing is returned: a note handed out is one the database
// counts as its own.
func TestCreateCheckpointIsAudited(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	var failAudit atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failAudit.Load() && strings.HasSuffix(op.Path, AuditFile) && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return errors.New("injected: no space left on device")
		}
		return nil
	})
	fs := errorfs.Wrap(testutil.LockOrdered(mem), inj)
	db := mustOpen(t, fs, Options{SegmentSize: 4096, InlineValueMax: 64})
	defer db.Close()
	fillAnchor(t, db, "a", 20, "x")
	skey, _ := coverKeys(t)

	failAudit.Store(true)
	msg, _, err := db.CreateCheckpoint(ctx, skey)
	failAudit.Store(false)
	if err == nil || msg != nil {
		t.Fatalf("CreateCheckpoint with an audit log that takes no line = %q, %v; want an error", msg, err)
	}
	if errs.CodeOf(err) != errs.CodeWriteFailed {
		t.Errorf("error %v: want IO_001", err)
	}
	if all, err := db.Checkpoints(ctx); err != nil || len(all) != 0 {
		t.Fatalf("checkpoints left after the failed audit append: %d, %v", len(all), err)
	}

	msg, _, err = db.CreateCheckpoint(ctx, skey)
	if err != nil {
		t.Fatal(err)
	}
	all, err := db.Checkpoints(ctx)
	if err != nil || len(all) != 1 {
		t.Fatalf("checkpoints: %d, %v", len(all), err)
	}
	recorded, err := db.auditedCheckpoints()
	if err != nil {
		t.Fatal(err)
	}
	it, ok := recorded[all[0].Name]
	if !ok || it.Hash != segment.Hash(blake3.Sum256(msg)) || it.Bytes != int64(len(msg)) || it.Kind != "checkpoint" {
		t.Fatalf("the audit log records %s as %+v (%v); want kind checkpoint, %d bytes, B3 of the note", all[0].Name, it, ok, len(msg))
	}
}

// A checkpoint of the database's replaced by one of the same body signed by
// someone else passes every check verify can make without a key but one:
// the audit log records the file the database stored under that name.
func TestVerifyFindsAReplacedCheckpoint(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{SegmentSize: 4096, InlineValueMax: 64})
	defer db.Close()
	fillAnchor(t, db, "a", 20, "x")
	skey, _ := coverKeys(t)
	if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
		t.Fatal(err)
	}
	all, err := db.Checkpoints(ctx)
	if err != nil || len(all) != 1 {
		t.Fatalf("checkpoints: %d, %v", len(all), err)
	}
	foreignKey, _, err := proof.GenerateKeys("someone.else/anchordb")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := proof.Sign(all[0].Checkpoint.Marshal(), foreignKey)
	if err != nil {
		t.Fatal(err)
	}
	writeAll(t, fs, all[0].Path, msg)
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, f := range rep.Failures {
		found = found || (f.Code == errs.CodeSignatureInvalid && f.File == all[0].Path && strings.Contains(f.Message, "audit log records"))
	}
	if rep.OK || !found {
		t.Fatalf("verify of a replaced checkpoint: ok=%v %+v; want AUTH_003 at %s", rep.OK, rep.Failures, all[0].Path)
	}
}
