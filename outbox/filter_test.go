package outbox

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// Every id added is held, across the growth from one filter to the next,
// and most ids never added are not.
func TestIDFilterHoldsEveryIDAdded(t *testing.T) {
	f := newIDFilter()
	const n = 5 * filterFirstCap
	for i := range n {
		f.add(fmt.Sprintf("id-%d", i))
	}
	if len(f.parts) < 3 {
		t.Fatalf("%d ids made %d filters, want growth past the first two", n, len(f.parts))
	}
	for i := range n {
		if id := fmt.Sprintf("id-%d", i); !f.mayHold(id) {
			t.Fatalf("%s was added but the filter does not hold it", id)
		}
	}
	falsePos := 0
	for i := range n {
		if f.mayHold(fmt.Sprintf("other-%d", i)) {
			falsePos++
		}
	}
	// About 1 in 2,000 per filter; allow ten times that.
	if limit := n * len(f.parts) / 200; falsePos > limit {
		t.Fatalf("%d of %d ids never added are held (more than %d)", falsePos, n, limit)
	}
}

// An outbox reopened on a database that holds entries fills its filter
// from the entry rows: once it is ready, a retry of every old id is a
// duplicate (or refused), and a new id is enqueued.
func TestReopenedOutboxKnowsItsIDs(t *testing.T) {
	ctx := context.Background()
	fs := newMem()
	db := openMemDB(t, fs)
	defer db.Close()
	ob, err := Open(ctx, db, "billing", Options{FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	for i := range n {
		if _, err := ob.Enqueue(ctx, Message{ID: fmt.Sprintf("m-%d", i), Payload: []byte("p")}); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := ob.Claim(ctx, "w", 10, 60e9)
	if err != nil || len(cs) != 10 {
		t.Fatalf("claim: %d %v", len(cs), err)
	}
	for _, c := range cs[:5] {
		if _, err := ob.Complete(ctx, *c.Lease, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := ob.Close(); err != nil {
		t.Fatal(err)
	}

	ob, err = Open(ctx, db, "billing", Options{FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	// The scan starts once the lookups that missed in the index reach a
	// sixteenth of the entries.
	ob.mu.RLock()
	started := ob.st.ids.ready
	ob.mu.RUnlock()
	if started || ob.fillAfter != n/fillPayback {
		t.Fatalf("filter ready at open (%v), or its scan to start after %d misses, not %d", started, ob.fillAfter, n/fillPayback)
	}
	for i := range n / fillPayback {
		if _, found, err := ob.Get(ctx, fmt.Sprintf("absent-%d", i)); err != nil || found {
			t.Fatalf("get of an id never enqueued: %v %v", found, err)
		}
	}
	<-ob.fillDone
	ob.mu.RLock()
	ready := ob.st.ids.ready
	ob.mu.RUnlock()
	if !ready {
		t.Fatal("the filter is not ready after its scan")
	}
	for i := range n {
		e, err := ob.Enqueue(ctx, Message{ID: fmt.Sprintf("m-%d", i), Payload: []byte("p")})
		if err != nil || !e.Duplicate {
			t.Fatalf("retry of m-%d: %+v %v", i, e, err)
		}
		_, err = ob.Enqueue(ctx, Message{ID: fmt.Sprintf("m-%d", i), Payload: []byte("other")})
		var se *StateError
		if !errors.As(err, &se) {
			t.Fatalf("m-%d with another payload: %v", i, err)
		}
	}
	e, err := ob.Enqueue(ctx, Message{ID: "new", Payload: []byte("p")})
	if err != nil || e.Duplicate {
		t.Fatalf("new id: %+v %v", e, err)
	}
	mustVerify(t, ob)
}
