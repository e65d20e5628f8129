package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/proof"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestAuditMarkVouchesForLinesWhoseHeadRowsWereLost: audited actions
// write their lines durably but the audit head's index row without a sync,
// so a power loss can leave the log several lines past the head the index
// kept. The mark written before the last line vouches for it and, through
// the chain, for the lines before it: after the crash the database
// appends after them and verifies. Without the mark they are lines
// somebody else wrote (INT_002). A torn mark, which a power loss leaves
// only in the slot an unwritten line's mark was going to (the other slot
// holds the mark before it), takes nothing away.
func TestAuditMarkVouchesForLinesWhoseHeadRowsWereLost(t *testing.T) {
	for _, mark := range []string{"kept", "next torn", "lost"} {
		t.Run(mark, func(t *testing.T) {
			ctx := context.Background()
			mem := vfs.NewCrashableMem()
			db := mustOpen(t, mem, Options{})
			skey, _, err := proof.GenerateKeys("test.example/anchordb")
			if err != nil {
				t.Fatal(err)
			}
			const lines = 3
			for i := range lines {
				if _, err := db.Put(ctx, "a", []byte(fmt.Sprint("k", i)), []byte("v")); err != nil {
					t.Fatal(err)
				}
				if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
					t.Fatal(err)
				}
			}
			crashed := testutil.CrashClone(mem, vfs.CrashCloneCfg{})
			_ = db.Close()
			path := crashed.PathJoin("db", AuditMarkFile)
			switch mark {
			case "next torn":
				// Line lines+1's mark goes to the slot of line lines-1.
				f, err := crashed.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteAt([]byte{0xff, 0xff, 0xff}, int64((lines+1)%2)*auditMarkSlot+5); err != nil {
					t.Fatal(err)
				}
				_ = f.Close()
			case "lost":
				if err := crashed.Remove(path); err != nil {
					t.Fatal(err)
				}
			}
			db = mustOpen(t, crashed, Options{})
			defer db.Close()
			n, _, err := db.auditHead()
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = db.CreateCheckpoint(ctx, skey)
			if mark == "lost" {
				if n == lines || !errors.Is(err, ErrChainBroken) {
					t.Fatalf("without the mark: head %d, checkpoint %v; want the lines past the head refused (INT_002)", n, err)
				}
				return
			}
			if n != lines {
				t.Fatalf("after the crash the head is line %d of %d", n, lines)
			}
			if err != nil {
				t.Fatalf("an audited action after the crash: %v", err)
			}
			if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
				t.Fatalf("verify: %+v %v", rep, err)
			}
		})
	}
}
