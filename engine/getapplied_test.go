package engine

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestGetAppliedDoesNotWait: while the applier is held, a durable append is
// acknowledged but not applied; GetApplied answers at once from the index as
// it stands (the key is not there yet), where Get would wait. Once a waiting
// read has returned, GetApplied sees the append.
func TestGetAppliedDoesNotWait(t *testing.T) {
	ctx := context.Background()
	db, release := heldApplier(t)
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("v1")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := db.GetApplied(ctx, []byte("k"))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("GetApplied of a key whose append is not applied: %v, want ErrNotFound", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("GetApplied waited for the held applier")
	}
	release()
	if _, err := db.Get(ctx, []byte("k")); err != nil {
		t.Fatal(err)
	}
	v, err := db.GetApplied(ctx, []byte("k"))
	if err != nil || !bytes.Equal(v.Value, []byte("v1")) || v.Seq != 1 || v.Anchor != "a" {
		t.Fatalf("GetApplied after a waiting read: %+v, %v; want v1 at a #1", v, err)
	}
}

// TestGetAppliedAnswers: the answers Get gives, once applied — a value, a
// deleted key and a missing one (ErrNotFound), a bad key (INPUT_001), a
// closed database (IO_001).
func TestGetAppliedAnswers(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, memOpts(fs))
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "a", []byte("gone"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Delete(ctx, "a", []byte("gone")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.AnchorInfo(ctx, "a"); err != nil { // a waiting read: everything before is applied
		t.Fatal(err)
	}
	if v, err := db.GetApplied(ctx, []byte("k")); err != nil || string(v.Value) != "v" {
		t.Fatalf("GetApplied(k) = %+v, %v", v, err)
	}
	v, err := db.GetApplied(ctx, []byte("gone"))
	if !errors.Is(err, ErrNotFound) || !v.Deleted || v.Seq != 3 {
		t.Fatalf("GetApplied of a deleted key: %+v, %v; want ErrNotFound with the delete's receipt", v, err)
	}
	if _, err := db.GetApplied(ctx, []byte("never")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetApplied of a missing key: %v", err)
	}
	if _, err := db.GetApplied(ctx, nil); CodeOf(err) != errs.CodeInvalidInput {
		t.Fatalf("GetApplied of an empty key: %v, want INPUT_001", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.GetApplied(ctx, []byte("k")); CodeOf(err) != errs.CodeWriteFailed {
		t.Fatalf("GetApplied after Close: %v, want IO_001", err)
	}
}
