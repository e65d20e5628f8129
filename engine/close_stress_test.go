package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// isClosedErr reports whether err is the refusal of a call that came after
// Close began: IO_001 "database is closed".
func isClosedErr(err error) bool {
	return errors.Is(err, ErrWriteFailed) && strings.Contains(err.Error(), "database is closed")
}

// TestCloseStressEveryAPI: Close races appends (sync and NoSync, single and
// batched, new idempotency keys and retries of acknowledged ones) and every
// other kind of call. Each call either completes or is refused with IO_001
// "database is closed"; none panics or hangs (DESIGN.md §2: Close waits for
// what it admitted and for the reads under way, and refuses the rest). After
// a reopen every acknowledged append is in its log, with the receipt's hash.
func TestCloseStressEveryAPI(t *testing.T) {
	ctx := context.Background()
	rounds := 3
	if testing.Short() || testutil.RaceEnabled {
		rounds = 2
	}
	skey, _, err := proof.GenerateKeys("close.stress/anchordb")
	if err != nil {
		t.Fatal(err)
	}
	policy := snapshot.DefaultPolicy()
	policy.Snapshot.EveryRecords = 40
	policy.KeepSnapshots = 2

	for round := 0; round < rounds; round++ {
		// A database of its own per round, and one to ingest from.
		fs := vfs.NewMem()
		src, err := Open("src", Options{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			if _, err := src.Put(ctx, "far", []byte(fmt.Sprint("f", i)), []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		if err := src.Close(); err != nil {
			t.Fatal(err)
		}
		dir := "db"
		db, err := Open(dir, Options{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 10; i++ {
			if _, err := db.Put(ctx, "a", []byte(fmt.Sprint(i)), []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		failures := make(chan string, 64)
		fail := func(format string, args ...any) {
			select {
			case failures <- fmt.Sprintf(format, args...):
			default:
			}
		}
		type pos struct {
			anchor string
			seq    uint64
		}
		var (
			mu    sync.Mutex
			acked = map[pos]segment.Hash{} // what the receipts returned said
		)
		ack := func(rs ...Receipt) {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range rs {
				p := pos{r.Anchor, r.Seq}
				if h, ok := acked[p]; ok && h != r.Hash {
					fail("two receipts for %s seq %d: hashes %x and %x", r.Anchor, r.Seq, h[:8], r.Hash[:8])
				}
				acked[p] = r.Hash
			}
		}

		// Each op is called in a loop until it is refused with "database is
		// closed": every call after Close began must be.
		type op func(n int) error
		const limit = 150 // appends of new keys per writer
		ops := map[string]op{}
		for w := 0; w < 2; w++ {
			for _, noSync := range []bool{false, true} {
				anchor := fmt.Sprintf("w%d-%v", w, noSync)
				ops["append "+anchor] = func(n int) error {
					// Every third call retries an earlier key, and past
					// limit every call does: a duplicate, answered with
					// the original receipt, the path that reads the index
					// before admission.
					id, retry := n, n%3 == 2 || n >= limit
					switch {
					case n >= limit:
						id = n % limit / 3 * 3 // appended new, below limit
					case retry:
						id = n - 2
					}
					e := Entry{Anchor: anchor, Type: segment.TypePut, Key: []byte(fmt.Sprint("k", id%7)), Value: []byte(fmt.Sprint(id)),
						IdempotencyKey: []byte(fmt.Sprint("op-", id))}
					r, err := db.Append(ctx, e, WithNoSync(noSync))
					if err != nil {
						return err
					}
					if retry && !r.Duplicate {
						fail("%s: a retry of key op-%d appended seq %d", anchor, id, r.Seq)
					}
					ack(r)
					return nil
				}
				ops["batch "+anchor] = func(n int) error {
					n %= limit
					es := make([]Entry, 3)
					for i := range es {
						es[i] = Entry{Anchor: fmt.Sprintf("%s-b%d", anchor, i), Type: segment.TypePut, Key: []byte(fmt.Sprint("b", n)),
							Value: []byte("v"), IdempotencyKey: []byte(fmt.Sprint("b-", n))}
					}
					rs, err := db.AppendBatch(ctx, es, WithNoSync(noSync))
					if err != nil {
						return err
					}
					ack(rs...)
					return nil
				}
			}
		}
		seqOf := func(it func(func(Record, error) bool)) error {
			for _, err := range it {
				if err != nil {
					return err
				}
			}
			return nil
		}
		drainV := func(it func(func(Version, error) bool)) error {
			for _, err := range it {
				if err != nil {
					return err
				}
			}
			return nil
		}
		ops["get"] = func(int) error { _, err := db.Get(ctx, []byte("3")); return notFoundIsNil(err) }
		ops["history"] = func(int) error { return seqOf(db.History(ctx, []byte("3"))) }
		ops["versions"] = func(int) error { return drainV(db.Versions(ctx, []byte("k1"))) }
		ops["scan"] = func(int) error { return drainV(db.Scan(ctx, nil)) }
		ops["log"] = func(int) error { return seqOf(db.Log(ctx, "a", 1, 0)) }
		ops["record"] = func(int) error { _, err := db.Record(ctx, "a", 1); return err }
		ops["merged"] = func(int) error {
			for _, err := range db.Merged(ctx, MergedOptions{}) {
				if err != nil {
					return err
				}
			}
			return nil
		}
		ops["getat"] = func(int) error {
			f, err := db.Frontier(ctx)
			if err != nil {
				return err
			}
			_, err = db.GetAt(ctx, []byte("3"), f)
			return notFoundIsNil(err)
		}
		ops["prove"] = func(int) error {
			if _, err := db.ProveInclusion(ctx, "a", 1, 0); err != nil {
				return err
			}
			if _, err := db.ProveConsistency(ctx, "a", 1, 5); err != nil {
				return err
			}
			_, _, err := db.AnchorRoot(ctx, "a", 0)
			return err
		}
		ops["range"] = func(int) error {
			if err := drainV(db.ScanRange(ctx, []byte("1"), []byte("5"))); err != nil {
				return err
			}
			_, _, err := db.MergedRoot(ctx, nil)
			return err
		}
		ops["verify snapshot"] = func(int) error {
			list, err := db.Snapshots(ctx)
			if err != nil || len(list) == 0 {
				return err
			}
			_, err = db.VerifySnapshot(ctx, list[len(list)-1].Path)
			if errors.Is(err, ErrInvalidInput) && strings.Contains(err.Error(), "does not exist") {
				return nil // a compaction removed it after the listing
			}
			return err
		}
		ops["anchors"] = func(int) error {
			for _, err := range db.Anchors(ctx) {
				if err != nil {
					return err
				}
			}
			_, _, err := db.AnchorInfo(context.Background(), "a")
			return err
		}
		ops["stats"] = func(int) error { _, err := db.Stats(ctx); return err }
		ops["verify"] = func(int) error { _, err := db.Verify(ctx, VerifyOptions{}); return err }
		ops["audit"] = func(int) error { _, err := db.VerifyAuditLog(ctx); return err }
		ops["snapshot"] = func(int) error { _, err := db.CreateSnapshot(ctx, ""); return err }
		ops["checkpoint"] = func(int) error { _, _, err := db.CreateCheckpoint(ctx, skey); return err }
		ops["sync"] = func(int) error { return db.Sync(context.Background()) }
		ops["compact"] = func(int) error {
			_, err := db.Compact(ctx, policy, CompactOptions{Apply: true})
			return err
		}
		ops["ingest"] = func(int) error { _, err := db.Ingest(ctx, "src", IngestOptions{}); return err }

		var wg, started sync.WaitGroup
		for name, call := range ops {
			wg.Add(1)
			started.Add(1)
			go func() {
				defer wg.Done()
				first := true
				defer func() {
					if first {
						started.Done()
					}
					if r := recover(); r != nil {
						fail("%s panicked: %v", name, r)
					}
				}()
				for n := 0; ; n++ {
					err := call(n)
					if first {
						first = false
						started.Done()
					}
					if err == nil {
						continue
					}
					if !isClosedErr(err) {
						fail("%s: %v", name, err)
					}
					return
				}
			}()
		}
		// Close once every op has made a call, at a varying point after.
		allStarted := make(chan struct{})
		go func() { started.Wait(); close(allStarted) }()
		select {
		case <-allStarted:
		case <-time.After(60 * time.Second):
			t.Fatalf("round %d: a call before Close hangs", round)
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		closed := make(chan error, 1)
		go func() { closed <- db.Close() }()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatalf("round %d: a call racing Close hangs", round)
		}
		select {
		case err := <-closed:
			if err != nil {
				t.Fatalf("round %d: close: %v", round, err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("round %d: Close hangs", round)
		}
		close(failures)
		for f := range failures {
			t.Errorf("round %d: %s", round, f)
		}
		if t.Failed() {
			t.FailNow()
		}

		db, err = Open(dir, Options{FS: fs})
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		for p, h := range acked {
			rec, err := db.Record(ctx, p.anchor, p.seq)
			if err != nil {
				t.Fatalf("round %d: acknowledged %s seq %d: %v", round, p.anchor, p.seq, err)
			}
			if rec.Hash != h {
				t.Fatalf("round %d: acknowledged %s seq %d has hash %x, the receipt %x", round, p.anchor, p.seq, rec.Hash[:8], h[:8])
			}
		}
		if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
			t.Fatalf("round %d: verify after reopen: %v %+v", round, err, rep)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: %d records acknowledged", round, len(acked))
	}
}
