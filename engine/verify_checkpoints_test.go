package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/proof"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestVerifyFindsARespelledCheckpointSignature: a stored
// checkpoint whose signature line was changed in a way the note package's
// lenient base64 decoding does not see (the unused low bits of its last
// character) is an AUTH_003 finding when verify is given the key.
func TestVerifyFindsARespelledCheckpointSignature(t *testing.T) {
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

// The database numbers the checkpoints it stores 1, 2, 3, …, each once. A
// genuine older checkpoint copied in under a number already taken (its own
// time in the name, so it sorts before the checkpoint it doubles) extends
// the one before it and is extended by the one after: only the number tells
// it, and a number that appears twice is INT_002. (A copy under the next
// number is caught as a shrink.)
func TestVerifyFindsACheckpointNumberUsedTwice(t *testing.T) {
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

// listHookFS calls onList before listing a directory.
type listHookFS struct {
	vfs.FS
	onList func(dir string)
}

func (h *listHookFS) List(dir string) ([]string, error) {
	if h.onList != nil {
		h.onList(dir)
	}
	return h.FS.List(dir)
}

// Verify works on a live database. A checkpoint signed while it runs, of
// records its index snapshot does not hold, is no finding: it must not read
// as one that lists more records than the database has (a false INT_002 on a
// sound database).
func TestCheckpointSignedDuringVerifyIsNoFinding(t *testing.T) {
	ctx := context.Background()
	hfs := &listHookFS{FS: vfs.NewMem()}
	db := mustOpen(t, hfs, Options{FS: hfs, SegmentSize: 4096})
	defer func() { _ = db.Close() }()
	skey, _, _ := proof.GenerateKeys("k")
	appendN(t, db, []string{"a", "b"}, 20, "x")
	var armed atomic.Bool
	hfs.onList = func(dir string) {
		// Verify lists the checkpoints once; sign one with more records
		// just before.
		if strings.HasSuffix(dir, CheckpointsDir) && armed.CompareAndSwap(true, false) {
			appendN(t, db, []string{"a", "b"}, 4, "y")
			if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
				t.Error(err)
			}
		}
	}
	armed.Store(true)
	rep, err := db.Verify(ctx, VerifyOptions{})
	if armed.Load() {
		t.Fatal("verify listed no checkpoints")
	}
	if err != nil || !rep.OK {
		t.Fatalf("a checkpoint signed during verify: %+v %v", rep, err)
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK || rep.Records != 24 {
		t.Fatalf("after: %+v %v", rep, err)
	}
}
