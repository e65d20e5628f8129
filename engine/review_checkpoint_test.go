package engine

import (
	"context"
	"testing"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/proof"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A checkpoint signs only durable records. CreateCheckpoint signed the
// anchors' visible heads, which hold NoSync appends that a power loss can
// still take away: the signed note was kept (fsynced) and printed, the
// records were lost, and the database then contradicted its own checkpoint
// — verify reported INT_002, and every later checkpoint was refused
// (STATE_002, "shrank") while new appends wrote other records at those
// seqs: two signed histories (SPEC §5, DESIGN §9).
func TestReviewCheckpointSignsOnlyDurableRecords(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	opts := Options{FS: mem, SegmentSize: 4096}
	db := mustOpen(t, mem, opts)
	skey, vkey, _ := proof.GenerateKeys("k")
	appendN(t, db, []string{"a", "b"}, 10, "x")
	for i := 0; i < 5; i++ {
		if _, err := db.Put(ctx, "a", []byte("k"), []byte("unsynced"), WithNoSync(true)); err != nil {
			t.Fatal(err)
		}
	}
	_, cp, err := db.CreateCheckpoint(ctx, skey)
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := cp.Entry("a"); e.Size != 5+5 { // 5 durable, 5 NoSync
		t.Fatalf("the checkpoint lists %d records of a, want 10", e.Size)
	}
	// Power loss: only what was fsynced survives.
	crashed := testutil.CrashClone(mem, vfs.CrashCloneCfg{})
	_ = db.Close()
	db = mustOpen(t, crashed, Options{FS: crashed, SegmentSize: 4096})
	defer func() { _ = db.Close() }()
	info, _, err := db.AnchorInfo(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := cp.Entry("a"); info.Records < e.Size {
		t.Fatalf("after a power loss anchor a has %d records; the signed checkpoint lists %d", info.Records, e.Size)
	}
	if rep, err := db.Verify(ctx, VerifyOptions{VerifierKeys: []string{vkey}}); err != nil || !rep.OK {
		t.Fatalf("verify after a power loss: %+v %v", rep, err)
	}
	if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
		t.Fatalf("the next checkpoint after a power loss: %v", err)
	}
}
