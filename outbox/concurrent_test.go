package outbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestConcurrentUse: enqueuers, claimers that complete, fail and extend,
// requeues of dead entries, readers of the stats and listings, and the
// background flusher, all at once. Then every entry is accounted for, no
// lease was honoured twice, a reopen rebuilds the same state from the log,
// and Verify passes. (Its value is under -race.)
func TestConcurrentUse(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := openMemDB(t, fs)
	defer db.Close()
	pol := Policy{Version: "v1", MaxAttempts: 2, Backoff: Backoff{BaseMS: 0, Multiplier: 1, CapMS: 0}}
	opts := Options{Policy: pol, FlushEntries: 16, FlushInterval: 2 * time.Millisecond}
	ob, err := Open(ctx, db, "billing", opts)
	if err != nil {
		t.Fatal(err)
	}
	n := 1200
	if testing.Short() {
		n = 300
	}
	var wg sync.WaitGroup
	var enqueued, requeued atomic.Int64
	var stop atomic.Bool
	var mu sync.Mutex
	honoured := map[uint64]string{} // lease token → id, for every accepted completion or failure
	honour := func(l Lease) {
		mu.Lock()
		defer mu.Unlock()
		if id, dup := honoured[l.Token]; dup {
			t.Errorf("lease %d (%s) honoured twice (first for %s)", l.Token, l.ID, id)
		}
		honoured[l.Token] = l.ID
	}
	// finished: everything enqueued is done or aborted (the dead ones get
	// requeued).
	finished := func() bool {
		st, err := ob.Stats(ctx)
		return err == nil && enqueued.Load() == int64(n) && st.Pending == 0 && st.Inflight == 0 && st.Dead == 0
	}
	fatal := func(format string, args ...any) {
		t.Errorf(format, args...)
		stop.Store(true)
	}
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n && !stop.Load(); i += 4 {
				id := fmt.Sprintf("c%05d", i)
				e, err := ob.Enqueue(ctx, Message{ID: id, Payload: []byte(id)})
				if err != nil {
					fatal("enqueue %s: %v", id, err)
					return
				}
				if !e.Duplicate {
					enqueued.Add(1)
				}
				if i%7 == 0 { // a retry, concurrent with whatever happens to it
					if e, err := ob.Enqueue(ctx, Message{ID: id, Payload: []byte(id)}); err == nil && !e.Duplicate {
						fatal("retry of %s appended", id)
					}
				}
			}
		}(w)
	}
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for !stop.Load() {
				cs, err := ob.Claim(ctx, fmt.Sprintf("w%d", w), 8, time.Hour)
				if err != nil {
					fatal("claim: %v", err)
					return
				}
				if len(cs) == 0 {
					if finished() {
						return
					}
					time.Sleep(time.Millisecond)
					continue
				}
				for i, c := range cs {
					l := *c.Lease
					switch (i + w) % 5 {
					case 0:
						if _, err := ob.Fail(ctx, l, errors.New("transient")); err != nil {
							fatal("fail: %v", err)
						}
						honour(l)
					case 1:
						nl, err := ob.Extend(ctx, l, time.Hour)
						if err != nil || nl.Token != l.Token {
							fatal("extend: %v", err)
						}
						fallthrough
					default:
						if _, err := ob.Complete(ctx, l, nil); err != nil {
							fatal("complete: %v", err)
						}
						honour(l)
					}
				}
			}
		}(w)
	}
	wg.Add(1)
	go func() { // requeue the dead ones now and then
		defer wg.Done()
		for !stop.Load() {
			ds, err := ob.Dead(ctx, 5)
			if err != nil {
				fatal("dead: %v", err)
				return
			}
			for _, d := range ds {
				if _, err := ob.Requeue(ctx, d.ID, AutoID); err == nil {
					requeued.Add(1)
				} else if !isStateErr(err) {
					fatal("requeue: %v", err)
				}
			}
			if _, err := ob.List(ctx, ListOptions{State: StatePending, Limit: 20}); err != nil {
				fatal("list: %v", err)
			}
			if finished() {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		stop.Store(true)
		<-done
		st, _ := ob.Stats(ctx)
		ps, _ := ob.List(ctx, ListOptions{State: StatePending, Limit: 5})
		is, _ := ob.List(ctx, ListOptions{State: StateInflight, Limit: 5})
		cs, err := ob.Claim(ctx, "last", 5, time.Minute)
		ob.mu.Lock()
		t.Logf("from %q %q hot %d dirty %d ready %d", ob.st.from[0], ob.st.from[1], len(ob.st.hot), len(ob.st.dirty), len(ob.st.ready))
		for _, p := range ps {
			h := ob.st.hot[p.ID]
			t.Logf("pending %s next %v enq %d hot %v", p.ID, p.NextAttemptAt, p.EnqueueSeq, h != nil)
		}
		ob.mu.Unlock()
		rep, _ := ob.Verify(ctx)
		for i, f := range rep.Failures {
			if i < 10 {
				t.Logf("finding: %v", f)
			}
		}
		t.Fatalf("the workers did not finish: %+v\npending %d inflight %d; a claim now: %d %v", st, len(ps), len(is), len(cs), err)
	}
	st, err := ob.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var byState counts
	for _, e := range snapshotEntries(t, ob) {
		byState[e.State-1]++
	}
	if got := (counts{st.Pending, st.Inflight, st.Done, st.Dead, st.Aborted}); got != byState {
		t.Errorf("stats count %v; the entries are %v", got, byState)
	}
	total := st.Pending + st.Inflight + st.Done + st.Dead + st.Aborted
	if total != int64(n)+requeued.Load() || st.Aborted != requeued.Load() {
		t.Fatalf("stats %+v: %d entries, want %d enqueued and %d requeued", st, total, n, requeued.Load())
	}
	want := snapshotEntries(t, ob)
	mustVerify(t, ob)
	if err := ob.Close(); err != nil {
		t.Fatal(err)
	}
	ob, err = Open(ctx, db, "billing", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	sameEntries(t, "after a reopen", snapshotEntries(t, ob), want)
	st2, _ := ob.Stats(ctx)
	st.Watermark, st.Unflushed, st2.Watermark, st2.Unflushed = 0, 0, 0, 0
	st.OldestPendingAge, st.OldestDeadAge, st2.OldestPendingAge, st2.OldestDeadAge = 0, 0, 0, 0
	if st != st2 {
		t.Fatalf("stats after a reopen %+v, before %+v", st2, st)
	}
	mustVerify(t, ob)
}
