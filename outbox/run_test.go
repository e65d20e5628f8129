package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine"
)

// TestRunDelivers: Run delivers every entry; a transient failure is retried
// under the policy, a permanent one makes the entry dead at once, a panic
// fails the attempt, and a handler's result is recorded.
func TestRunDelivers(t *testing.T) {
	ctx := context.Background()
	pol := Policy{Version: "v1", MaxAttempts: 3, Backoff: Backoff{BaseMS: 1, Multiplier: 1, CapMS: 1}}
	ob, _, _ := testOutbox(t, Options{Policy: pol, Clock: time.Now, FlushEntries: 16})
	const n = 200
	for i := 0; i < n; i++ {
		if _, err := ob.Enqueue(ctx, Message{ID: fmt.Sprintf("m%03d", i), Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	calls := map[string]int{}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- ob.Run(runCtx, func(_ context.Context, e Entry) ([]byte, error) {
			mu.Lock()
			calls[e.ID]++
			c := calls[e.ID]
			mu.Unlock()
			var i int
			fmt.Sscanf(e.ID, "m%d", &i)
			switch {
			case i%10 == 1 && c == 1:
				return nil, errors.New("transient")
			case i%10 == 2:
				return nil, Permanent(errors.New("permanent"))
			case i%10 == 3:
				panic("handler bug")
			}
			return []byte("ok-" + e.ID), nil
		}, RunOptions{Workers: 8, Batch: 4, LeaseTTL: time.Minute, PollInterval: time.Millisecond})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := ob.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Done+st.Dead == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not delivered: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("m%03d", i)
		e, _, err := ob.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		switch i % 10 {
		case 1:
			if e.State != StateDone || e.Attempts != 2 || calls[id] != 2 || e.LastError == nil {
				t.Errorf("%s: %+v after %d calls, want done on the second attempt", id, e, calls[id])
			}
		case 2:
			if e.State != StateDead || e.Attempts != 1 || !e.LastError.Permanent {
				t.Errorf("%s: %+v, want dead after one attempt", id, e)
			}
		case 3:
			if e.State != StateDead || e.Attempts != 3 || calls[id] != 3 {
				t.Errorf("%s: %+v after %d calls, want dead after the policy's three attempts", id, e, calls[id])
			}
		default:
			if e.State != StateDone || string(e.Result) != "ok-"+id || calls[id] != 1 {
				t.Errorf("%s: %+v after %d calls", id, e, calls[id])
			}
		}
	}
	mustVerify(t, ob)
}

// TestRunStopsAndLeaseComesBack: when ctx ends, a handler that returns
// ctx's error leaves its entry inflight; once the lease expires the entry
// is claimed again (the process that held it is gone, as after a crash).
// A late completion under the old lease is refused.
func TestRunStopsAndLeaseComesBack(t *testing.T) {
	ctx := context.Background()
	ob, _, clk := testOutbox(t, Options{})
	if _, err := ob.Enqueue(ctx, Message{ID: "slow"}); err != nil {
		t.Fatal(err)
	}
	started := make(chan Entry, 1)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- ob.Run(runCtx, func(hctx context.Context, e Entry) ([]byte, error) {
			started <- e
			<-hctx.Done()
			return nil, hctx.Err()
		}, RunOptions{LeaseTTL: time.Hour, PollInterval: time.Millisecond})
	}()
	first := <-started
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	e, _, _ := ob.Get(ctx, "slow")
	if e.State != StateInflight || e.Lease.Token != first.Lease.Token {
		t.Fatalf("after stopping: %+v, want inflight under the first lease", e)
	}
	if cs, _ := ob.Claim(ctx, "other", 1, time.Minute); len(cs) != 0 {
		t.Fatalf("claimed under a live lease: %+v", cs)
	}
	clk.Add(time.Hour)
	cs, err := ob.Claim(ctx, "other", 1, time.Minute)
	if err != nil || len(cs) != 1 || cs[0].Attempts != 2 || cs[0].Lease.Token <= first.Lease.Token {
		t.Fatalf("claim after expiry: %+v %v", cs, err)
	}
	var se *StateError
	if _, err := ob.Complete(ctx, *first.Lease, nil); !errors.As(err, &se) || engine.CodeOf(err) != "STATE_002" || se.Entry.Lease.Token != cs[0].Lease.Token {
		t.Fatalf("late completion under the expired lease: %v", err)
	}
	if _, err := ob.Complete(ctx, *cs[0].Lease, nil); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, ob)
}

// TestRunOutcomeOfALostLeaseKeepsTheNewClaim: when a Run claims an entry
// again whose earlier lease it still holds (the lease expired while its
// handler ran), the earlier job is lost — its handler's context ends —
// and its outcome must not take the new claim out of what Run holds:
// that one is still running, and its lease must be renewed.
func TestRunOutcomeOfALostLeaseKeepsTheNewClaim(t *testing.T) {
	ctx := context.Background()
	ob, _, clk := testOutbox(t, Options{})
	if _, err := ob.Enqueue(ctx, Message{ID: "x"}); err != nil {
		t.Fatal(err)
	}
	first, err := ob.Claim(ctx, "run", 1, time.Minute)
	if err != nil || len(first) != 1 {
		t.Fatal(first, err)
	}
	ro := RunOptions{Workers: 1, Batch: 1, LeaseTTL: time.Minute, PollInterval: time.Millisecond, Worker: "run"}
	r := &runner{o: ob, ro: ro, held: map[string]*job{}, jobs: make(chan *job, 3), outcomes: make(chan *job, 1), freed: make(chan struct{}, 1)}
	r.ctx, r.stop = context.WithCancel(ctx)
	old := &job{e: first[0], lease: *first[0].Lease}
	old.ctx, old.cancel = context.WithCancel(r.ctx)
	r.held["x"] = old
	clk.Add(time.Hour) // the lease expires while the handler runs
	dispatched := make(chan struct{})
	go func() { r.dispatch(); close(dispatched) }()
	cur := <-r.jobs
	r.stop()
	<-dispatched
	if cur.lease.Token <= old.lease.Token {
		t.Fatalf("the second claim's lease %d, the first's %d", cur.lease.Token, old.lease.Token)
	}
	if !old.lost.Load() || old.ctx.Err() == nil {
		t.Fatalf("the job under the expired lease %d goes on after the run claimed its entry again", old.lease.Token)
	}
	// Its handler returns (a success, late): the outcome is dropped, and
	// the new claim stays held.
	r.outcomes <- old
	close(r.outcomes)
	r.finish()
	if r.held["x"] != cur {
		t.Fatalf("the outcome of lease %d took the claim under lease %d out of the held jobs", old.lease.Token, cur.lease.Token)
	}
	if e, _, _ := ob.Get(ctx, "x"); e.State != StateInflight || e.Lease.Token != cur.lease.Token {
		t.Fatalf("entry after the old outcome: %s under lease %v", e.State, e.Lease)
	}
}

// TestRunRecordsAnOversizeResultAsAFailure: a handler whose result is over
// the outbox's MaxPayload cannot have it recorded. Its attempt fails,
// permanently and saying why; the outcomes recorded with it in the same
// batch are recorded; and Run goes on.
func TestRunRecordsAnOversizeResultAsAFailure(t *testing.T) {
	ctx := context.Background()
	ob, _, _ := testOutbox(t, Options{Clock: time.Now, MaxPayload: 1024})
	const n = 40
	for i := range n {
		if _, err := ob.Enqueue(ctx, Message{ID: fmt.Sprintf("m%02d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- ob.Run(runCtx, func(_ context.Context, e Entry) ([]byte, error) {
			if e.ID == "m07" {
				return make([]byte, 4096), nil
			}
			return []byte("ok"), nil
		}, RunOptions{Workers: 4, LeaseTTL: time.Minute, PollInterval: time.Millisecond})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := ob.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Done+st.Dead == n {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned while entries were left (%+v): %v", st, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not delivered: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	e, _, _ := ob.Get(ctx, "m07")
	if e.State != StateDead || e.LastError == nil || !e.LastError.Permanent || !strings.Contains(e.LastError.Message, "over the limit") {
		t.Fatalf("the entry whose result was too large: %s after %d attempts, last error %+v", e.State, e.Attempts, e.LastError)
	}
	mustVerify(t, ob)
}
