package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestVerifySound(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, memOpts(fs))
	for i := 0; i < 300; i++ {
		a := fmt.Sprintf("a%d", i%3)
		var err error
		if i%5 == 0 {
			_, err = db.Append(ctx, Entry{Anchor: a, Type: "put", Key: []byte(fmt.Sprint("k", i%7)), Value: []byte(fmt.Sprint("v", i)), IdempotencyKey: []byte(fmt.Sprint("id", i))})
		} else if i%7 == 0 {
			_, err = db.Delete(ctx, a, []byte(fmt.Sprint("k", i%7)))
		} else {
			_, err = db.Put(ctx, a, []byte(fmt.Sprint("k", i%7)), []byte(fmt.Sprint("value-", i)))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil || !rep.OK {
		t.Fatalf("live: %+v %v", rep, err)
	}
	t.Logf("%+v", rep)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = mustOpen(t, fs, memOpts(fs))
	defer db.Close()
	rep, err = db.Verify(ctx, VerifyOptions{Threads: 1})
	if err != nil || !rep.OK || rep.Records != 300 || rep.Anchors != 3 {
		t.Fatalf("reopened: %+v %v", rep, err)
	}
}

// TestVerifyWhileAppending: Verify, proofs and checkpoints on a database
// that keeps taking appends (sync and NoSync, sealing segments, idempotent
// retries) see a consistent point and report nothing.
func TestVerifyWhileAppending(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{FS: fs, SegmentSize: 4096})
	defer db.Close()
	skey, _, _ := proof.GenerateKeys("k")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				e := Entry{Anchor: fmt.Sprintf("a%d", (w+i)%5), Type: "put", Key: []byte(fmt.Sprint("k", i%13)), Value: []byte(fmt.Sprint(w, "-", i))}
				if i%3 == 0 {
					e.IdempotencyKey = []byte(fmt.Sprint("op-", w, "-", i))
				}
				if _, err := db.Append(ctx, e, WithNoSync(i%2 == 0)); err != nil {
					errc <- err
					return
				}
			}
		}(w)
	}
	for {
		if info, ok, _ := db.AnchorInfo(context.Background(), "a1"); ok && info.Records > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	deadline := time.Now().Add(2 * time.Second)
	if testing.Short() || testutil.RaceEnabled {
		deadline = time.Now().Add(500 * time.Millisecond)
	}
	runs := 0
	for time.Now().Before(deadline) {
		rep, err := db.Verify(ctx, VerifyOptions{Threads: 2})
		if err != nil || !rep.OK {
			close(stop)
			wg.Wait()
			t.Fatalf("verify while appending (run %d): %+v %v", runs, rep, err)
		}
		if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
			t.Fatalf("checkpoint while appending: %v", err)
		}
		if p, err := db.ProveInclusion(ctx, "a1", 1, 0); err != nil {
			t.Fatalf("proof while appending: %v", err)
		} else if err := proof.VerifyInclusionProof(p); err != nil {
			t.Fatalf("proof while appending does not verify: %v", err)
		}
		runs++
	}
	close(stop)
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil || !rep.OK {
		t.Fatalf("after: %+v %v", rep, err)
	}
	t.Logf("%d verifications of up to %d records while appending", runs, rep.Records)
}

// TestVerifyDamagedAtOpen: damage that recovery finds at open makes the
// anchor read-only; Verify still checks it and reports both the damage and
// what it finds, and checks the other anchors as usual.
func TestVerifyDamagedAtOpen(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	db := mustOpen(t, fs, memOpts(fs))
	for i := 0; i < 150; i++ {
		if _, err := db.Put(ctx, fmt.Sprintf("a%d", i%3), []byte(fmt.Sprint("k", i)), []byte(fmt.Sprint("value-", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A crash (the database is never closed), then the active segment of a1
	// cut inside a record the index has: recovery reports it and marks a1
	// read-only.
	crashed := testutil.CrashClone(fs, vfs.CrashCloneCfg{})
	_ = db.Close()
	e, _, err := func() (schema.Location, bool, error) {
		probe := mustOpen(t, testutil.CrashClone(fs, vfs.CrashCloneCfg{}), memOpts(nil))
		defer probe.Close()
		return probe.location("a1", 45)
	}()
	if err != nil {
		t.Fatal(err)
	}
	path := crashed.PathJoin(segment.AnchorDir(crashed, "db", "a1"), segment.FileName(e.Segno))
	data, err := testutil.ReadFile(crashed, path)
	if err != nil {
		t.Fatal(err)
	}
	off := e.Offset
	testutil.WriteFile(crashed, path, data[:off+5])
	db = mustOpen(t, crashed, memOpts(crashed))
	defer db.Close()
	if info, _, _ := db.AnchorInfo(context.Background(), "a1"); info.Damage == "" {
		t.Fatalf("open did not mark a1 damaged: %+v", db.RecoveryReport())
	}
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil || rep.OK || rep.Anchors != 3 || rep.Records != 144 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	var recorded, found bool
	for _, f := range rep.Failures {
		if f.Anchor != "a1" {
			t.Fatalf("finding about a sound anchor: %+v", f)
		}
		recorded = recorded || strings.Contains(f.Message, "damage recorded earlier")
		found = found || (f.Code == "INT_002" && f.File == path && f.Seq == 45 && f.Offset == off)
	}
	if !recorded || !found {
		t.Fatalf("findings %+v", rep.Failures)
	}
}
