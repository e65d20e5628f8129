package engine

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/proof"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestCreateCheckpointReadsOnlyTheNewest: a database that signs a
// checkpoint after every few appends keeps thousands of them. A new one
// must extend the newest and take the next number, and reads that one
// file alone: reading and parsing every stored checkpoint made each
// CreateCheckpoint slower than the last (time to proof grew with the
// checkpoints kept). Nor does it settle: one journal fdatasync makes the
// records it signs durable. It still lists them all (Checkpoints) in order.
func TestCreateCheckpointReadsOnlyTheNewest(t *testing.T) {
	ctx := context.Background()
	var reads atomic.Int64
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpOpen && strings.HasSuffix(op.Path, checkpointExt) {
			reads.Add(1)
		}
		return nil
	}))
	db := mustOpen(t, fs, Options{})
	defer db.Close()
	skey, _, err := proof.GenerateKeys("test.example/anchordb")
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	settles := db.Metrics().Settles
	for i := range n {
		if _, err := db.Put(ctx, "a", []byte{byte(i)}, []byte("v")); err != nil {
			t.Fatal(err)
		}
		before := reads.Load()
		if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
			t.Fatal(err)
		}
		if got, want := reads.Load()-before, int64(min(i, 1)); got != want {
			t.Fatalf("checkpoint %d read %d stored checkpoints, want %d", i+1, got, want)
		}
	}
	if got := db.Metrics().Settles - settles; got != 0 {
		t.Errorf("%d checkpoints settled the database %d times", n, got)
	}
	all, err := db.Checkpoints(ctx)
	if err != nil || len(all) != n {
		t.Fatalf("%d checkpoints listed (%v), want %d", len(all), err, n)
	}
	for i, c := range all {
		if c.Err != nil || checkpointSeq(c.Name) != uint64(i+1) {
			t.Fatalf("checkpoint %d: %s %v", i+1, c.Name, c.Err)
		}
	}
	latest, err := db.LatestCheckpoint(ctx)
	if err != nil || latest == nil || latest.Name != all[n-1].Name {
		t.Fatalf("latest %+v %v, want %s", latest, err, all[n-1].Name)
	}
}

// TestCreateCheckpointRefusedOnceWritesStopped: a database that stopped
// accepting writes (a failed fsync, a failed apply) signs nothing: the
// checkpoint would be stored and audited on top of a state the database
// no longer vouches for. The refusal is the failure itself.
func TestCreateCheckpointRefusedOnceWritesStopped(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t, vfs.NewMem(), Options{})
	defer db.Close()
	skey, _, err := proof.GenerateKeys("test.example/anchordb")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	failure := db.fail(errs.New(errs.CodeWriteFailed, "injected: the journal's fsync failed"))
	if _, _, err := db.CreateCheckpoint(ctx, skey); !errors.Is(err, failure) && CodeOf(err) != errs.CodeWriteFailed {
		t.Fatalf("checkpoint after writes stopped: %v, want the failure (IO_001)", err)
	}
	if all, err := db.Checkpoints(ctx); err != nil || len(all) != 0 {
		t.Fatalf("a checkpoint was stored after writes stopped: %d %v", len(all), err)
	}
}
