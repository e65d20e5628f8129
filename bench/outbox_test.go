package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/outbox"
)

// The outbox benchmarks, named so that one run pairs them with the append
// benchmarks (docs/PERFORMANCE.md, docs/OUTBOX.md):
//
//	OutboxEnqueue/writers=64      vs AppendSync/writers=64/anchors=16: 64 goroutines each
//	                              Enqueue one 100-byte message at a time, durable; records/s
//	                              counts entries enqueued.
//	OutboxDeliver/workers=16      vs the same: Run with 16 workers and a handler that does
//	                              nothing delivers entries enqueued before the timer; each
//	                              delivery is a claim (in batches) and a completion, both
//	                              durable. deliveries/s.
//	OutboxClaim/pending=N         one goroutine: Claim of one entry from an outbox holding N
//	                              pending entries (flushed, so in the index rows); the entry is
//	                              then completed and a new one enqueued, outside the
//	                              measured time, so N stays N. p99-ns is the 99th percentile
//	                              of the Claim calls.
//
// Like AppendSync, each opens a fresh database (default options) on the
// real filesystem and warms it before the timer starts: the outbox's
// anchor gets its first records and the database settles.

// openOutbox opens outbox "bench" on db, closed when tb ends (before db,
// whose cleanup was registered first).
func openOutbox(tb testing.TB, db *engine.DB, opts outbox.Options) *outbox.Outbox {
	tb.Helper()
	ob, err := outbox.Open(context.Background(), db, "bench", opts)
	if err != nil {
		tb.Fatalf("open outbox: %v", err)
	}
	tb.Cleanup(func() {
		if err := ob.Close(); err != nil {
			tb.Errorf("close outbox: %v", err)
		}
	})
	return ob
}

// warmOutbox enqueues one entry, flushes and settles, so the measured
// appends find the anchor's directory and segment in place.
func warmOutbox(tb testing.TB, db *engine.DB, ob *outbox.Outbox) {
	tb.Helper()
	ctx := context.Background()
	if _, err := ob.Enqueue(ctx, outbox.Message{ID: "warm", Payload: []byte("warm")}); err != nil {
		tb.Fatalf("warm outbox: %v", err)
	}
	if err := ob.Flush(ctx); err != nil {
		tb.Fatalf("warm outbox: flush: %v", err)
	}
	if err := db.Sync(ctx); err != nil {
		tb.Fatalf("warm outbox: sync: %v", err)
	}
}

func entryID(i int) string { return fmt.Sprintf("e-%010d", i) }

// outboxEnqueue: writers goroutines Enqueue message i (a 100-byte payload).
func outboxEnqueue(writers int) workload {
	return func(tb testing.TB) body {
		db := openEngine(tb, "", engine.Options{})
		ob := openOutbox(tb, db, outbox.Options{})
		warmOutbox(tb, db, ob)
		bufs := make([]kvBuf, writers)
		ctx := context.Background()
		return func(n int) (int64, error) {
			err := Parallel(n, writers, func(w, i int) error {
				_, v := bufs[w].kv(uint64(i))
				_, err := ob.Enqueue(ctx, outbox.Message{ID: entryID(i), Payload: v})
				return err
			})
			return int64(n), err
		}
	}
}

func BenchmarkOutboxEnqueue(b *testing.B) {
	b.Run("writers=64", func(b *testing.B) { run(b, outboxEnqueue(64)) })
}

// enqueueAll enqueues messages [from, from+n) in batches of batch.
func enqueueAll(ctx context.Context, ob *outbox.Outbox, from, n, batch int) error {
	var kb kvBuf
	ms := make([]outbox.Message, 0, batch)
	for i := from; i < from+n; i += batch {
		ms = ms[:0]
		for j := i; j < min(i+batch, from+n); j++ {
			_, v := kb.kv(uint64(j))
			ms = append(ms, outbox.Message{ID: entryID(j), Payload: append([]byte(nil), v...)})
		}
		if _, err := ob.EnqueueBatch(ctx, ms); err != nil {
			return fmt.Errorf("enqueue %d..: %w", i, err)
		}
	}
	return nil
}

func BenchmarkOutboxDeliver(b *testing.B) {
	b.Run("workers=16", func(b *testing.B) {
		ctx := context.Background()
		db := openEngine(b, "", engine.Options{})
		ob := openOutbox(b, db, outbox.Options{})
		warmOutbox(b, db, ob)
		if err := enqueueAll(ctx, ob, 0, b.N, 1000); err != nil {
			b.Fatal(err)
		}
		if err := ob.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		if err := db.Sync(ctx); err != nil {
			b.Fatal(err)
		}
		var delivered atomic.Int64
		all := make(chan struct{})
		want := int64(b.N) + 1 // and the warm-up entry
		runCtx, stop := context.WithCancel(ctx)
		var runErr error
		var wg sync.WaitGroup
		b.ResetTimer()
		wg.Add(1)
		go func() {
			defer wg.Done()
			runErr = ob.Run(runCtx, func(context.Context, outbox.Entry) ([]byte, error) {
				return nil, nil
			}, outbox.RunOptions{Workers: 16, LeaseTTL: time.Minute, PollInterval: time.Millisecond})
		}()
		// Deliveries are counted by completions: Stats' count of done
		// entries, read every 5 ms.
		go func() {
			defer close(all)
			for runCtx.Err() == nil {
				st, err := ob.Stats(ctx)
				if err == nil && st.Done >= want {
					delivered.Store(st.Done)
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
		select {
		case <-all:
		case <-time.After(10 * time.Minute):
			b.Fatal("deliveries did not finish")
		}
		b.StopTimer()
		stop()
		wg.Wait()
		if runErr != nil {
			b.Fatal(runErr)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
	})
}

// outboxClaimFixtures holds, per size, a closed database whose outbox
// "bench" has that many pending entries, flushed.
var outboxClaimFixtures onceBySize[string]

func buildOutboxClaimFixture(n int) (string, error) {
	dir, err := fixtureDir("outbox-claim")
	if err != nil {
		return "", err
	}
	ctx := context.Background()
	db, err := engine.Open(dir, engine.Options{NoSync: true})
	if err != nil {
		return "", err
	}
	ob, err := outbox.Open(ctx, db, "bench", outbox.Options{NoSync: true})
	if err != nil {
		_ = db.Close()
		return "", err
	}
	err = enqueueAll(ctx, ob, 0, n, 10000)
	for err == nil {
		var st outbox.Stats
		if st, err = ob.Stats(ctx); err != nil || st.Unflushed == 0 {
			break
		}
		err = ob.Flush(ctx)
	}
	if cerr := ob.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = db.Sync(ctx)
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	return dir, compactPebble(filepath.Join(dir, engine.IndexDir))
}

// outboxClaimNext numbers the entries the claim benchmarks enqueue in place
// of those they claim, across runs on one fixture.
var outboxClaimNext sync.Map // fixture size → *atomic.Int64

func BenchmarkOutboxClaim(b *testing.B) {
	for _, n := range []int{1000, 1_000_000} {
		b.Run(fmt.Sprintf("pending=%d", n), func(b *testing.B) {
			dir, err := outboxClaimFixtures.get(n, buildOutboxClaimFixture)
			if err != nil {
				b.Fatalf("build %d pending entries: %v", n, err)
			}
			// The runs share the fixture (a copy of a million entries
			// would cost more than the runs): each completes the entries it
			// claims and enqueues new ones in their place, so n stay
			// pending, and its claims start where the last run's stopped.
			v, _ := outboxClaimNext.LoadOrStore(n, new(atomic.Int64))
			next := v.(*atomic.Int64)
			ctx := context.Background()
			db := openEngine(b, dir, engine.Options{})
			ob := openOutbox(b, db, outbox.Options{})
			lat := make([]time.Duration, 0, b.N)
			var kb kvBuf
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				cs, err := ob.Claim(ctx, "bench", 1, time.Minute)
				lat = append(lat, time.Since(t0))
				if err != nil || len(cs) != 1 {
					b.Fatalf("claim %d: %d entries, %v", i, len(cs), err)
				}
				b.StopTimer()
				if _, err := ob.Complete(ctx, *cs[0].Lease, nil); err != nil {
					b.Fatal(err)
				}
				j := n + int(next.Add(1))
				_, v := kb.kv(uint64(j))
				if _, err := ob.Enqueue(ctx, outbox.Message{ID: entryID(j), Payload: v}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
		})
	}
}
