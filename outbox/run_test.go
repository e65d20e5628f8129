package outbox

import (
	"context"
	"errors"
	"fmt"
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
