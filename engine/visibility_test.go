package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// applierHold stops the applier before its next round of groups, as often
// as a test asks: hold, then release. Appends are acknowledged while it is
// held, so everything a reader sees must come from the wait in
// awaitVisible.
type applierHold struct {
	mu sync.Mutex
	ch chan struct{}
}

// holdApplier installs an applierHold, released, in db's applier.
func holdApplier(db *DB) *applierHold {
	h := &applierHold{}
	db.commit.env.beforeApply = h.wait
	return h
}

func (h *applierHold) hold() {
	h.mu.Lock()
	if h.ch == nil {
		h.ch = make(chan struct{})
	}
	h.mu.Unlock()
}

func (h *applierHold) release() {
	h.mu.Lock()
	if h.ch != nil {
		close(h.ch)
		h.ch = nil
	}
	h.mu.Unlock()
}

func (h *applierHold) wait() {
	h.mu.Lock()
	c := h.ch
	h.mu.Unlock()
	if c != nil {
		<-c
	}
}

// heldApplier opens a database whose applier is held from the start, and
// releases and closes it when the test ends.
func heldApplier(t *testing.T) (db *DB, release func()) {
	t.Helper()
	db = mustOpen(t, vfs.NewMem(), Options{})
	h := holdApplier(db)
	h.hold()
	t.Cleanup(func() {
		h.release()
		_ = db.Close()
	})
	return db, h.release
}

// TestAcknowledgedBeforeApplied: a durable append returns once its journal
// block is fsynced, before the index holds it, and a read that starts after
// it returns waits for the applier and then sees it.
func TestAcknowledgedBeforeApplied(t *testing.T) {
	ctx := context.Background()
	db, release := heldApplier(t)

	acked := make(chan Receipt, 1)
	go func() {
		r, err := db.Put(ctx, "a", []byte("k"), []byte("v1"))
		if err != nil {
			t.Error(err)
		}
		acked <- r
	}()
	var r Receipt
	select {
	case r = <-acked:
	case <-time.After(10 * time.Second):
		t.Fatal("a durable Put did not return while the applier was held: it waited for the apply")
	}
	if r.Seq != 1 {
		t.Fatalf("receipt %+v, want seq 1", r)
	}
	if got := db.commit.vis.applied.Load(); got >= db.commit.vis.acked.Load() {
		t.Fatalf("applied %d, acknowledged %d: the append was applied while the applier was held", got, db.commit.vis.acked.Load())
	}

	// Reads started now wait for the applier, whatever they read.
	reads := map[string]func(context.Context) error{
		"Get": func(ctx context.Context) error {
			v, err := db.Get(ctx, []byte("k"))
			if err == nil && !bytes.Equal(v.Value, []byte("v1")) {
				err = fmt.Errorf("value %q", v.Value)
			}
			return err
		},
		"Record": func(ctx context.Context) error {
			rec, err := db.Record(ctx, "a", 1)
			if err == nil && rec.Hash != r.Hash {
				err = errors.New("another record")
			}
			return err
		},
		"Scan": func(ctx context.Context) error {
			n := 0
			for _, err := range db.Scan(ctx, nil) {
				if err != nil {
					return err
				}
				n++
			}
			if n != 1 {
				return fmt.Errorf("%d keys", n)
			}
			return nil
		},
		"Log": func(ctx context.Context) error {
			n := 0
			for _, err := range db.Log(ctx, "a", 1, 0) {
				if err != nil {
					return err
				}
				n++
			}
			if n != 1 {
				return fmt.Errorf("%d records", n)
			}
			return nil
		},
		"AnchorInfo": func(context.Context) error {
			info, ok, err := db.AnchorInfo(context.Background(), "a")
			if err == nil && (!ok || info.Records != 1) {
				err = fmt.Errorf("anchor info %+v, found %v", info, ok)
			}
			return err
		},
		"ProveInclusion": func(ctx context.Context) error {
			_, err := db.ProveInclusion(ctx, "a", 1, 1)
			return err
		},
	}
	// A read whose context ends while it waits says so.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := reads["Get"](short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get with the applier held and a 20ms deadline: %v, want the deadline", err)
	}

	done := make(map[string]chan error)
	for name, read := range reads {
		ch := make(chan error, 1)
		done[name] = ch
		go func() { ch <- read(ctx) }()
	}
	time.Sleep(50 * time.Millisecond)
	for name, ch := range done {
		select {
		case err := <-ch:
			t.Fatalf("%s returned (%v) while the append it follows was not applied", name, err)
		default:
		}
	}
	release()
	for name, ch := range done {
		if err := <-ch; err != nil {
			t.Errorf("%s after the apply: %v", name, err)
		}
	}
}

// TestRetryOfAcknowledgedAppend: an idempotency key acknowledged but not yet
// applied is committed. A retry is answered as a duplicate at once and the
// same key with another payload is STATE_002, as if the index held it.
func TestRetryOfAcknowledgedAppend(t *testing.T) {
	ctx := context.Background()
	db, release := heldApplier(t)
	e := Entry{Anchor: "a", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v"), IdempotencyKey: []byte("op-1")}
	first, err := db.Append(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	again, err := db.Append(ctx, e)
	if err != nil || !again.Duplicate || again.Seq != first.Seq || again.Hash != first.Hash {
		t.Fatalf("retry while unapplied: %+v, %v; want a duplicate of %+v", again, err, first)
	}
	other := e
	other.Value = []byte("w")
	if _, err := db.Append(ctx, other); errs.CodeOf(err) != errs.CodeConflict {
		t.Fatalf("same key, other payload, while unapplied: %v, want STATE_002", err)
	}
	release()
	if v, err := db.Get(ctx, []byte("k")); err != nil || string(v.Value) != "v" {
		t.Fatalf("after the apply: %+v, %v", v, err)
	}
}

// TestEarlyAcknowledgementIsBounded: with the applier held, appends are
// acknowledged early only up to maxEarlyRecords; past that, callers wait
// for the apply, so a slow index cannot grow the backlog without bound.
func TestEarlyAcknowledgementIsBounded(t *testing.T) {
	ctx := context.Background()
	db, release := heldApplier(t)
	const batch = 1000
	entries := func(i int) []Entry {
		es := make([]Entry, batch)
		for j := range es {
			es[j] = Entry{Anchor: "a", Type: segment.TypePut, Key: []byte(fmt.Sprintf("k%d-%d", i, j)), Value: []byte("v")}
		}
		return es
	}
	returned := make(chan int, 64)
	total := maxEarlyRecords/batch + 4
	go func() {
		for i := 0; i < total; i++ {
			if _, err := db.AppendBatch(ctx, entries(i)); err != nil {
				t.Error(err)
			}
			returned <- i
		}
	}()
	// Every batch that fits the bound returns with the applier held.
	fit := maxEarlyRecords / batch
	for i := 0; i < fit; i++ {
		select {
		case <-returned:
		case <-time.After(10 * time.Second):
			t.Fatalf("batch %d of %d records did not return with %d records acknowledged early (bound %d)", i, batch, i*batch, maxEarlyRecords)
		}
	}
	select {
	case i := <-returned:
		t.Fatalf("batch %d returned with the applier held and %d records acknowledged early (bound %d)", i, (i+1)*batch, maxEarlyRecords)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	for i := fit; i < total; i++ {
		<-returned
	}
	n := 0
	for _, err := range db.Scan(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != total*batch {
		t.Fatalf("%d keys after the apply, want %d", n, total*batch)
	}
}

// TestNoSyncAcknowledgedBeforeApplied: a NoSync append returns once its
// journal block is written, before the index holds it, even from a lone
// writer with nothing else in flight; a read that follows waits for the
// apply. Past the backlog bound a NoSync caller waits too.
func TestNoSyncAcknowledgedBeforeApplied(t *testing.T) {
	ctx := context.Background()
	db, release := heldApplier(t)

	put := func(i int) <-chan error {
		ch := make(chan error, 1)
		go func() {
			_, err := db.Put(ctx, "a", []byte(fmt.Sprintf("k%d", i)), []byte("v"), WithNoSync(true))
			ch <- err
		}()
		return ch
	}
	// One record at a time, so the bound is reached record by record.
	for i := 0; i < maxEarlyRecords; i++ {
		select {
		case err := <-put(i):
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("NoSync Put %d did not return with the applier held and %d records acknowledged early", i, i)
		}
		if i == 0 {
			if got := db.commit.vis.applied.Load(); got >= db.commit.vis.acked.Load() {
				t.Fatalf("applied %d, acknowledged %d: the first NoSync append was applied while the applier was held", got, db.commit.vis.acked.Load())
			}
		}
	}
	// The backlog is full: the next caller waits for the apply.
	over := put(maxEarlyRecords)
	select {
	case err := <-over:
		t.Fatalf("NoSync Put past the bound returned (%v) with the applier held", err)
	case <-time.After(100 * time.Millisecond):
	}
	read := make(chan error, 1)
	go func() {
		v, err := db.Get(ctx, []byte("k0"))
		if err == nil && string(v.Value) != "v" {
			err = fmt.Errorf("value %q", v.Value)
		}
		read <- err
	}()
	select {
	case err := <-read:
		t.Fatalf("Get returned (%v) while the NoSync append it follows was not applied", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	if err := <-over; err != nil {
		t.Fatal(err)
	}
	if err := <-read; err != nil {
		t.Fatalf("Get after the apply: %v", err)
	}
	n := 0
	for _, err := range db.Scan(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != maxEarlyRecords+1 {
		t.Fatalf("%d keys after the apply, want %d", n, maxEarlyRecords+1)
	}
}

// TestMergedBatchKeptByPebble: groups applied together are merged into a
// batch the applier reuses. Pebble keeps one past half the memtable as a
// memtable of its own; with a small memtable, such a round and the rounds
// that reuse the batch after it all read back.
func TestMergedBatchKeptByPebble(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t, vfs.NewMem(), Options{NoSync: true, PebbleOptions: func(o *pebble.Options) {
		o.MemTableSize = 1 << 20
	}})
	defer db.Close()
	h := holdApplier(db)
	value := bytes.Repeat([]byte{'v'}, 200)
	key := func(round, i int) []byte { return []byte(fmt.Sprintf("r%d-k%04d", round, i)) }
	for round := 0; round < 4; round++ {
		h.hold()
		n := 3000 // about 1.5 MiB of rows in one round: past half the memtable
		if round > 0 {
			n = 50 // rounds small enough to reuse the merge batch
		}
		for i := 0; i < n; i++ {
			if _, err := db.Put(ctx, fmt.Sprint("a", i%7), key(round, i), value); err != nil {
				t.Fatal(err)
			}
		}
		h.release()
		for r := 0; r <= round; r++ {
			for i := 0; i < 50; i++ {
				v, err := db.Get(ctx, key(r, i))
				if err != nil || !bytes.Equal(v.Value, value) {
					t.Fatalf("round %d: key %s: %q, %v", round, key(r, i), v.Value, err)
				}
			}
		}
	}
}
