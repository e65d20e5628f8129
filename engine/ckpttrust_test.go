package engine

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
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
		})
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
