package outbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestConcurrentUseCrashes: enqueuers that race each other on the same
// ids, claimers that complete, fail, extend and replay old leases, and a
// flusher at full speed, until the machine crashes at a random sync. The
// database that reopens has every operation acknowledged before the
// crash (durable rounds; the NoSync ones may lose a tail); its log never
// enqueued an id twice nor completed one twice; the outbox rebuilt from
// it verifies; a retry of every enqueue writes nothing it had; and
// everything is then delivered.
func TestConcurrentUseCrashes(t *testing.T) {
	rounds := 6
	if testing.Short() {
		rounds = 2
	}
	for round := range rounds {
		noSync := round%3 == 2
		t.Run(fmt.Sprintf("%d/nosync=%v", round, noSync), func(t *testing.T) { concurrentCrashRound(t, uint64(round), noSync) })
	}
}

func concurrentCrashRound(t *testing.T, seed uint64, noSync bool) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 7))
	mem := vfs.NewCrashableMem()
	fs := newSyncCrashFS(mem)
	eopts := engine.Options{FS: fs, SegmentSize: 8 << 10, SettleBytes: 32 << 10}
	db, err := engine.Open("db", eopts)
	if err != nil {
		t.Fatal(err)
	}
	pol := Policy{Version: "v1", MaxAttempts: 3, Backoff: Backoff{BaseMS: 0, Multiplier: 1, CapMS: 0}}
	opts := Options{Policy: pol, FlushEntries: 8, FlushInterval: time.Millisecond, NoSync: noSync}
	ob, err := Open(ctx, db, "billing", opts)
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	id := func(i int) string { return fmt.Sprintf("c%04d", i) }

	// What was acknowledged before the crash: ops that returned before the
	// clone was taken are in it.
	crashed := &fs.crashed
	var mu sync.Mutex
	acked := map[string]State{} // id → a state it reached, acknowledged before the crash
	ack := func(e Entry) {
		if crashed.Load() || noSync {
			return
		}
		mu.Lock()
		if acked[e.ID] == 0 || e.State != StatePending {
			acked[e.ID] = e.State
		}
		mu.Unlock()
	}
	fs.arm(50+rng.IntN(400), rng.IntN(2) == 0)
	var wg sync.WaitGroup
	var stop atomic.Bool
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < n && !stop.Load(); j++ {
				i := (j*(w+1) + w*37) % n // every writer every id, in its own order
				e, err := ob.Enqueue(ctx, Message{ID: id(i), Payload: []byte(id(i))})
				if err != nil {
					var se *StateError
					if errors.As(err, &se) {
						continue // dead or aborted by now
					}
					t.Errorf("enqueue %s: %v", id(i), err)
					return
				}
				ack(e)
			}
		}()
	}
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var old []Lease
			for !stop.Load() {
				cs, err := ob.Claim(ctx, fmt.Sprintf("w%d", w), 8, time.Hour)
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				if len(cs) == 0 {
					time.Sleep(100 * time.Microsecond)
				}
				for i, c := range cs {
					l := *c.Lease
					switch (i + w) % 4 {
					case 0:
						e, err := ob.Fail(ctx, l, errors.New("transient"))
						if err != nil {
							t.Errorf("fail: %v", err)
						}
						ack(e)
					case 1:
						if _, err := ob.Extend(ctx, l, time.Hour); err != nil {
							t.Errorf("extend: %v", err)
						}
						fallthrough
					default:
						e, err := ob.Complete(ctx, l, nil)
						if err != nil {
							t.Errorf("complete: %v", err)
						}
						ack(e)
					}
					old = append(old, l)
				}
				// An old lease is refused, whatever became of its entry.
				if len(old) > 0 {
					l := old[rng.IntN(len(old))]
					if _, err := ob.Complete(ctx, l, nil); !isStateErr(err) {
						t.Errorf("a second completion under lease %d of %s: %v", l.Token, l.ID, err)
					}
				}
			}
		}()
	}
	// The crash: once the armed sync came, the old process is gone.
	for {
		time.Sleep(time.Millisecond)
		fs.mu.Lock()
		done := fs.left == 0 || fs.clone != nil
		fs.mu.Unlock()
		if done {
			break
		}
	}
	clone := fs.take()
	stop.Store(true)
	wg.Wait()
	_ = ob.Close()
	_ = db.Close()

	fs = newSyncCrashFS(clone)
	eopts.FS = fs
	if db, err = engine.Open("db", eopts); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rl, err := replayLog(ctx, db, "billing")
	if err != nil {
		t.Fatal(err)
	}
	if len(rl.problems) > 0 {
		t.Fatalf("the log after the crash: %v", rl.problems)
	}
	if ob, err = Open(ctx, db, "billing", opts); err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	mustVerify(t, ob)
	for i := range n {
		want := acked[id(i)]
		e, found, err := ob.Get(ctx, id(i))
		switch {
		case err != nil:
			t.Fatal(err)
		case want != 0 && !found:
			t.Fatalf("%s was acknowledged %s and is lost", id(i), want)
		case want == StateDone && e.State != StateDone:
			t.Fatalf("%s was acknowledged done and is %s", id(i), e.State)
		}
	}
	// A retry of every enqueue writes nothing the log has.
	for i := range n {
		before, found, _ := ob.Get(ctx, id(i))
		e, err := ob.Enqueue(ctx, Message{ID: id(i), Payload: []byte(id(i))})
		if err != nil && !isStateErr(err) {
			t.Fatal(err)
		}
		if found && err == nil && (!e.Duplicate || e.Receipt.Seq != before.Receipt.Seq) {
			t.Fatalf("retry of %s: %+v, the entry was %+v", id(i), e, before)
		}
	}
	// Everything is delivered, each entry completed once.
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- ob.Run(runCtx, func(context.Context, Entry) ([]byte, error) { return nil, nil },
			RunOptions{Workers: 4, LeaseTTL: time.Minute, PollInterval: time.Millisecond})
	}()
	for {
		st, err := ob.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Pending == 0 && st.Inflight == 0 {
			break
		}
		if st.Inflight > 0 && st.Pending == 0 {
			// Leases of the crashed process: they expire only in an hour.
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if rl, err = replayLog(ctx, db, "billing"); err != nil {
		t.Fatal(err)
	}
	if len(rl.problems) > 0 {
		t.Fatalf("the log: %v", rl.problems)
	}
	if len(rl.last) != n {
		t.Fatalf("the log holds %d entries, want %d", len(rl.last), n)
	}
	mustVerify(t, ob)
}
