package outbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine"
)

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	ob, _, clk := testOutbox(t, Options{Policy: Policy{Version: "v1", MaxAttempts: 2, Backoff: Backoff{BaseMS: 1000, Multiplier: 2, CapMS: 10000}}})
	e, err := ob.Enqueue(ctx, Message{ID: "a", Payload: []byte("pay-a")})
	if err != nil {
		t.Fatal(err)
	}
	if e.State != StatePending || e.EnqueueSeq != 1 || e.Duplicate {
		t.Fatalf("enqueue: %+v", e)
	}
	d, err := ob.Enqueue(ctx, Message{ID: "a", Payload: []byte("pay-a")})
	if err != nil || !d.Duplicate || d.State != StatePending {
		t.Fatalf("retry: %+v %v", d, err)
	}
	_, err = ob.Enqueue(ctx, Message{ID: "a", Payload: []byte("other")})
	var se *StateError
	if !errors.As(err, &se) || engine.CodeOf(err) != engine.Code("STATE_002") || se.Existing == "" || se.State() != StatePending {
		t.Fatalf("mismatch: %v", err)
	}
	if _, err := ob.Enqueue(ctx, Message{ID: "b", Payload: []byte("pay-b")}); err != nil {
		t.Fatal(err)
	}
	cs, err := ob.Claim(ctx, "w1", 10, time.Minute)
	if err != nil || len(cs) != 2 || cs[0].ID != "a" || cs[1].ID != "b" {
		t.Fatalf("claim: %+v %v", cs, err)
	}
	if cs[0].Lease.Token >= cs[1].Lease.Token || cs[0].Attempts != 1 {
		t.Fatalf("tokens: %+v", cs)
	}
	if again, err := ob.Claim(ctx, "w2", 10, time.Minute); err != nil || len(again) != 0 {
		t.Fatalf("second claim: %+v %v", again, err)
	}
	done, err := ob.Complete(ctx, *cs[0].Lease, []byte("ok"))
	if err != nil || done.State != StateDone || string(done.Result) != "ok" || done.Payload != nil {
		t.Fatalf("complete: %+v %v", done, err)
	}
	if _, err := ob.Complete(ctx, *cs[0].Lease, nil); !errors.As(err, &se) || se.State() != StateDone {
		t.Fatalf("second complete: %v", err)
	}
	f, err := ob.Fail(ctx, *cs[1].Lease, errors.New("boom"))
	if err != nil || f.State != StatePending || f.LastError == nil || f.LastError.PolicyRef != ob.Policy().PolicyRef() {
		t.Fatalf("fail: %+v %v", f, err)
	}
	if cs, err := ob.Claim(ctx, "w1", 10, time.Minute); err != nil || len(cs) != 0 {
		t.Fatalf("claim before the retry is due: %+v %v", cs, err)
	}
	clk.Add(2 * time.Second)
	cs, err = ob.Claim(ctx, "w1", 10, time.Minute)
	if err != nil || len(cs) != 1 || cs[0].Attempts != 2 {
		t.Fatalf("claim of the retry: %+v %v", cs, err)
	}
	dead, err := ob.Fail(ctx, *cs[0].Lease, errors.New("boom again"))
	if err != nil || dead.State != StateDead {
		t.Fatalf("last fail: %+v %v", dead, err)
	}
	if err := ob.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ds, err := ob.Dead(ctx, 0)
	if err != nil || len(ds) != 1 || ds[0].ID != "b" {
		t.Fatalf("dead: %+v %v", ds, err)
	}
	n, err := ob.Requeue(ctx, "b", AutoID, By("ops"))
	if err != nil || n.ID != "b~1" || n.Supersedes != "b" || n.State != StatePending {
		t.Fatalf("requeue: %+v %v", n, err)
	}
	in, err := ob.Inspect(ctx, "b")
	if err != nil || in.Entry.State != StateAborted || len(in.Chain) != 2 || in.Chain[1] != "b~1" || len(in.Transitions) != 6 {
		t.Fatalf("inspect: %+v %v", in, err)
	}
	st, err := ob.Stats(ctx)
	if err != nil || st.Pending != 1 || st.Done != 1 || st.Aborted != 1 || st.Dead != 0 || st.Inflight != 0 {
		t.Fatalf("stats: %+v %v", st, err)
	}
	mustVerify(t, ob)
	if err := ob.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, ob)
}
