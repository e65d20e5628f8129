package engine

import (
	"context"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestRetryOfCommittedAppendDuringIngestIsDuplicate: while an ingest holds
// an anchor, local appends to it are refused (STATE_001) because they would
// move its head. A retry of an append the anchor already holds moves
// nothing: SPEC §7 answers it with the original receipt, Duplicate set. It
// was refused with STATE_001 whenever it reached the commit leader — with
// admission off always, and otherwise whenever some unrelated NoSync write
// had left the journal unsynced, so the answer to the same retry depended on
// other anchors' traffic.
func TestRetryOfCommittedAppendDuringIngestIsDuplicate(t *testing.T) {
	for _, disable := range []bool{false, true} {
		name := "admission"
		if disable {
			name = "admission-off"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			fs := vfs.NewMem()
			open := func(dir string) *DB {
				t.Helper()
				db, err := Open(dir, Options{FS: fs, DisableAdmission: disable})
				if err != nil {
					t.Fatal(err)
				}
				return db
			}
			orig := Entry{Anchor: "a", Type: "put", Key: []byte("x"), Value: []byte("v"), IdempotencyKey: []byte("k1")}
			src := open("src")
			first, err := src.Append(ctx, orig)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := src.Put(ctx, "b", []byte("b1"), []byte("v")); err != nil {
				t.Fatal(err)
			}
			if err := src.Close(); err != nil {
				t.Fatal(err)
			}
			dst := open("dst")
			defer dst.Close()
			if _, err := dst.Ingest(ctx, "src", IngestOptions{}); err != nil {
				t.Fatal(err)
			}
			src = open("src")
			for _, k := range []string{"b2", "b3"} {
				if _, err := src.Put(ctx, "b", []byte(k), []byte("v")); err != nil {
					t.Fatal(err)
				}
			}
			if err := src.Close(); err != nil {
				t.Fatal(err)
			}

			var retry Receipt
			var retryErr error
			calls := 0
			_, err = dst.Ingest(ctx, "src", IngestOptions{Progress: func(done, total uint64) {
				if calls++; calls > 1 {
					return
				}
				// Another anchor's NoSync write leaves the journal unsynced.
				if _, err := dst.Put(ctx, "c", []byte("c"), []byte("v"), WithNoSync(true)); err != nil {
					t.Errorf("NoSync put to an anchor not ingested: %v", err)
				}
				retry, retryErr = dst.Append(ctx, orig)
			}})
			if err != nil {
				t.Fatal(err)
			}
			if calls == 0 {
				t.Fatal("the progress callback never ran")
			}
			if retryErr != nil {
				t.Fatalf("retry of an append anchor %q holds, during an ingest of it: %v; want its original receipt (SPEC §7)", "a", retryErr)
			}
			if !retry.Duplicate || retry.Seq != first.Seq || retry.Hash != first.Hash {
				t.Fatalf("retry: %+v, want the original %+v as a duplicate", retry, first)
			}
		})
	}
}
