package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/proof"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestProveRecordVerifiesAgainstTheCheckpoint: the path of the README — a
// record proved against a signed checkpoint, verified with the verifier key
// alone — and every way it must fail: another key (AUTH_003), a record or
// path changed after proving, a checkpoint of another size (INT_001), a
// record the checkpoint does not cover, an anchor it does not list, a note
// of another database, no checkpoint at all (STATE_003).
func TestProveRecordVerifiesAgainstTheCheckpoint(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, memOpts(fs))
	defer db.Close()
	signer, pub, err := proof.GenerateKeys("auditor")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ProveRecord(ctx, "dev", 1, nil); errs.CodeOf(err) != errs.CodeDependencyMissing {
		t.Fatalf("a proof with no stored checkpoint: %v, want STATE_003", err)
	}
	for i := 1; i <= 5; i++ {
		if _, err := db.Append(ctx, Entry{Anchor: "dev", Type: "put", Key: []byte(fmt.Sprint("k", i)), Value: []byte(fmt.Sprint("v", i)), IdempotencyKey: []byte(fmt.Sprint("i", i))}); err != nil {
			t.Fatal(err)
		}
	}
	note, _, err := db.CreateCheckpoint(ctx, signer)
	if err != nil {
		t.Fatal(err)
	}
	rp, err := db.ProveRecord(ctx, "dev", 3, note)
	if err != nil {
		t.Fatal(err)
	}
	if rp.Record.Seq != 3 || string(rp.Record.Value) != "v3" || string(rp.Record.IdempotencyKey) != "i3" || rp.Inclusion.Size != 5 {
		t.Fatalf("proof of the wrong record: %+v size %d", rp.Record, rp.Inclusion.Size)
	}
	for _, n := range [][]byte{note, nil} {
		cp, err := rp.Verify(n, pub)
		if err != nil {
			t.Fatalf("verify against note %v: %v", n != nil, err)
		}
		if e, ok := cp.Entry("dev"); !ok || e.Size != 5 {
			t.Fatalf("verified against %+v", cp)
		}
	}
	if stored, err := db.ProveRecord(ctx, "dev", 3, nil); err != nil || string(stored.Note) != string(note) {
		t.Fatalf("a proof against the newest stored checkpoint: %v", err)
	}

	_, otherPub, err := proof.GenerateKeys("other")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rp.Verify(note, otherPub); errs.CodeOf(err) != errs.CodeSignatureInvalid {
		t.Errorf("verify with another key: %v, want AUTH_003", err)
	}
	changed := *rp
	changed.Record.Value = []byte("v4")
	if _, err := changed.Verify(note, pub); errs.CodeOf(err) != errs.CodeHashMismatch {
		t.Errorf("a record changed after proving: %v, want INT_001", err)
	}
	changed = *rp
	changed.Record.Time = changed.Record.Time.Add(1)
	changed.Record.Hash = changed.Record.ComputeHash()
	if _, err := changed.Verify(note, pub); errs.CodeOf(err) != errs.CodeHashMismatch {
		t.Errorf("a changed record with its hash recomputed: %v, want INT_001", err)
	}
	incl := *rp.Inclusion
	incl.Proof = append([]Hash(nil), incl.Proof...)
	incl.Proof[0][0] ^= 1
	changed = *rp
	changed.Inclusion = &incl
	if _, err := changed.Verify(note, pub); errs.CodeOf(err) != errs.CodeHashMismatch {
		t.Errorf("a changed path: %v, want INT_001", err)
	}

	// A newer checkpoint: the old proof is at another size.
	if _, err := db.Put(ctx, "dev", []byte("k6"), []byte("v6")); err != nil {
		t.Fatal(err)
	}
	newer, _, err := db.CreateCheckpoint(ctx, signer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rp.Verify(newer, pub); errs.CodeOf(err) != errs.CodeHashMismatch {
		t.Errorf("a proof at size 5 against a checkpoint at size 6: %v, want INT_001", err)
	}
	if rp6, err := db.ProveRecord(ctx, "dev", 6, newer); err != nil {
		t.Errorf("record 6 against the newer checkpoint: %v", err)
	} else if _, err := rp6.Verify(newer, pub); err != nil {
		t.Errorf("verify record 6: %v", err)
	}
	for name, c := range map[string]struct {
		anchor string
		seq    uint64
	}{"a seq past the checkpoint": {"dev", 6}, "an anchor it does not list": {"nosuch", 1}} {
		if _, err := db.ProveRecord(ctx, c.anchor, c.seq, note); errs.CodeOf(err) != errs.CodeDependencyMissing {
			t.Errorf("%s: %v, want STATE_003", name, err)
		}
	}

	// A checkpoint of another database.
	fs2 := vfs.NewMem()
	other := mustOpen(t, fs2, memOpts(fs2))
	defer other.Close()
	if _, err := other.Put(ctx, "dev", []byte("k1"), []byte("v1")); err != nil {
		t.Fatal(err)
	}
	foreign, _, err := other.CreateCheckpoint(ctx, signer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ProveRecord(ctx, "dev", 1, foreign); errs.CodeOf(err) != errs.CodeDependencyMissing {
		t.Errorf("a checkpoint of another database: %v, want STATE_003", err)
	}
	if _, err := db.ProveRecord(ctx, "dev", 1, []byte("not a note")); errs.CodeOf(err) == "" {
		t.Errorf("a note that is none: %v, want a coded error", err)
	}
}
