package engine

import (
	"context"
	"testing"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestReviewDurableRetryOfNoSyncAppend: a durable append (the default) that
// is a retry of a NoSync append returns only once the record its receipt
// names is durable (SPEC §3, §7): the duplicate receipt must survive a power
// loss right after it. The duplicate fast path of admission answered it at
// once, with the original's journal block not yet fsynced.
func TestReviewDurableRetryOfNoSyncAppend(t *testing.T) {
	for _, batch := range []bool{false, true} {
		name := map[bool]string{false: "append", true: "batch"}[batch]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			mem := vfs.NewCrashableMem()
			db, err := Open("db", Options{FS: mem})
			if err != nil {
				t.Fatal(err)
			}
			e := Entry{Anchor: "a", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v"), IdempotencyKey: []byte("op-1")}
			e2 := Entry{Anchor: "b", Type: "EVENT", Value: []byte("x"), IdempotencyKey: []byte("op-2")}
			var r1 Receipt
			if batch {
				rs, err := db.AppendBatch(ctx, []Entry{e, e2}, WithNoSync(true))
				if err != nil {
					t.Fatal(err)
				}
				r1 = rs[0]
			} else if r1, err = db.Append(ctx, e, WithNoSync(true)); err != nil {
				t.Fatal(err)
			}
			// Let the NoSync group be applied: the retry then finds the
			// key in the index.
			if _, err := db.Get(ctx, []byte("k")); err != nil {
				t.Fatal(err)
			}
			var r2 Receipt
			if batch {
				rs, err := db.AppendBatch(ctx, []Entry{e, e2}) // durable
				if err != nil {
					t.Fatal(err)
				}
				r2 = rs[0]
			} else if r2, err = db.Append(ctx, e); err != nil { // durable
				t.Fatal(err)
			}
			if !r2.Duplicate || r2.Seq != r1.Seq || r2.Hash != r1.Hash {
				t.Fatalf("retry: %+v, want the duplicate of %+v", r2, r1)
			}
			crashed := testutil.CrashClone(mem, vfs.CrashCloneCfg{}) // power loss: only synced data
			_ = db.Close()
			db2, err := Open("db", Options{FS: crashed})
			if err != nil {
				t.Fatal(err)
			}
			defer db2.Close()
			rec, err := db2.Record(ctx, "a", r2.Seq)
			if err != nil || rec.Hash != r2.Hash {
				t.Fatalf("the record of the durable duplicate receipt %+v is lost after a power loss: %v", r2, err)
			}
		})
	}
}
