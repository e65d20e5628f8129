package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestSnapshotCreateVerifyAndCorruption(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{SegmentSize: 4096, InlineValueMax: 16})
	defer db.Close()
	for i := 0; i < 300; i++ {
		a := fmt.Sprintf("a%d", i%4)
		k := []byte(fmt.Sprintf("k%02d", i%37))
		var err error
		if i%9 == 0 {
			_, err = db.Delete(ctx, a, k)
		} else {
			// Values beyond InlineValueMax are read from their segments.
			_, err = db.Put(ctx, a, k, []byte(fmt.Sprintf("value-%d-%s", i, "padding-beyond-inline")))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	info, err := db.CreateSnapshot(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	live := 0
	for range db.Scan(ctx, nil) {
		live++
	}
	if info.Entries != uint64(live) || len(info.Frontier) != 4 {
		t.Fatalf("snapshot has %d entries and %d anchors; state has %d keys", info.Entries, len(info.Frontier), live)
	}
	// More writes after the snapshot do not change what it proves.
	if _, err := db.Put(ctx, "a0", []byte("k00"), []byte("later")); err != nil {
		t.Fatal(err)
	}
	v, err := db.VerifySnapshot(ctx, info.Path)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if v.ReplayedRecords != 300 || v.ReplayStateHash != info.StateHash {
		t.Fatalf("replay: %+v", v)
	}
	list, err := db.Snapshots(ctx)
	if err != nil || len(list) != 1 || list[0].Name != info.Name {
		t.Fatalf("list: %+v %v", list, err)
	}
	// One byte flipped anywhere: INT_003, never a panic.
	data, _ := fs.UnsafeGetFileDataBuffer(info.Path)
	for _, off := range []int{0, 20, len(data) / 2, len(data) - 40, len(data) - 1} {
		data[off] ^= 0x10
		_, err := db.VerifySnapshot(ctx, info.Path)
		data[off] ^= 0x10
		if !errors.Is(err, ErrSnapshotCorrupted) {
			t.Fatalf("flip at %d: %v, want INT_003", off, err)
		}
	}
	if _, err := db.VerifySnapshot(ctx, info.Path); err != nil {
		t.Fatalf("restored file: %v", err)
	}
	// A well-formed snapshot whose state is not what the log says: the
	// replay proof catches it.
	f := info.Frontier
	forged, err := snapshot.Create(fs, db.SnapshotsDir(), snapshot.Meta{Frontier: f},
		func(yield func(snapshot.Entry, error) bool) {
			yield(snapshot.Entry{Key: []byte("k01"), Value: []byte("forged"), Version: snapshot.Version{Anchor: "a1", Seq: 1, Counter: 2}}, nil)
		})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.VerifySnapshot(ctx, forged.Path); !errors.Is(err, ErrSnapshotCorrupted) {
		t.Fatalf("forged state: %v, want INT_003", err)
	}
	// A frontier whose head hash is not the log's.
	h := f["a2"]
	h.Hash[0] ^= 1
	f2 := snapshot.Frontier{}
	for k, v := range f {
		f2[k] = v
	}
	f2["a2"] = h
	orig, err := snapshot.Open(fs, info.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	wrong, err := snapshot.Create(fs, db.SnapshotsDir(), snapshot.Meta{Frontier: f2}, orig.Entries())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.VerifySnapshot(ctx, wrong.Path); !errors.Is(err, ErrSnapshotCorrupted) {
		t.Fatalf("wrong frontier: %v, want INT_003", err)
	}
}

func TestVerifyReportsCorruptSnapshotsAndAudit(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, _ := compactFixture(t, fs)
	defer db.Close()
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil || !rep.OK {
		t.Fatalf("clean database: %+v %v", rep, err)
	}
	list, _ := db.Snapshots(ctx)
	data, _ := fs.UnsafeGetFileDataBuffer(list[0].Path)
	data[len(data)/2] ^= 1
	rep, err = db.Verify(ctx, VerifyOptions{})
	if err != nil || rep.OK || len(rep.Failures) != 1 || rep.Failures[0].Code != CodeOf(ErrSnapshotCorrupted) || rep.Failures[0].File != list[0].Path {
		t.Fatalf("corrupt snapshot: %+v %v", rep, err)
	}
	data[len(data)/2] ^= 1
	// The audit log losing its last line is told from a torn append by the
	// head the index kept.
	audit, _ := fs.UnsafeGetFileDataBuffer(db.AuditPath())
	f, _ := fs.Create(db.AuditPath(), vfs.WriteCategoryUnspecified)
	cut := bytes.LastIndexByte(audit[:len(audit)-1], '\n') + 1
	_, _ = f.Write(append([]byte(nil), audit[:cut]...))
	_ = f.Close()
	rep, err = db.Verify(ctx, VerifyOptions{})
	if err != nil || rep.OK || rep.Failures[0].File != db.AuditPath() {
		t.Fatalf("audit log missing its last line: %+v %v", rep, err)
	}
}

// TestCreateSnapshotIsAudited: every snapshot made in the database, not only
// a compaction's, is recorded in the audit log with its hashes, which is
// what verify holds a snapshot to once the log below it is truncated.
func TestCreateSnapshotIsAudited(t *testing.T) {
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
	audited, err := db.auditedSnapshots()
	if err != nil {
		t.Fatal(err)
	}
	it, ok := audited[info.Name]
	if !ok || it.StateHash != info.StateHash || it.Hash != info.FileHash {
		t.Fatalf("the audit log records %+v (found %v) for snapshot %+v", it, ok, info)
	}
	if _, err := db.VerifyAuditLog(ctx); err != nil {
		t.Fatal(err)
	}
}
