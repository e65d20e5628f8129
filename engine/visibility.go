package engine

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/anchordb/anchordb/engine/internal/schema"
)

// Acknowledged before applied.
//
// A durable append is acknowledged once its journal block is fsynced: that
// is what makes it durable (SPEC §3), and recovery replays the journal into
// the segments and the index. Applying the group to the index and the
// segment buffers follows in the applier. Waiting for that apply before
// waking the caller put a Pebble commit on every append's critical path, so
// the syncer wakes a group's callers as soon as the fsync returns and the
// applier catches up behind it. A NoSync group is complete once its block is
// written, so its leader acknowledges it the same way (commit.go, handOff).
//
// Reads stay linearizable: every read waits, before it looks at the index or
// a head, until every group acknowledged when it started is applied. A read
// with nothing acknowledged ahead of the applier — any read while no durable
// append is in flight — costs two atomic loads. A caller that appends and
// then reads always sees its own append.
//
// The applier's backlog of acknowledged groups is bounded
// (maxEarlyRecords, maxEarlyBytes): past it, the syncer leaves groups to be
// completed by the applier, as before, and their callers wait for the apply
// — the backpressure that keeps a slow index from growing memory without
// bound. Groups that carry settle marks are never acknowledged early: the
// settler needs what the applier captures.
type visibility struct {
	acked   atomic.Uint64 // the last group whose callers were woken before its apply
	applied atomic.Uint64 // the last group applied to the index

	stopped atomic.Bool // the applier has ended (Close): nothing more will be applied

	mu      sync.Mutex
	changed chan struct{} // closed when applied advances, the database fails or the applier ends; nil with no waiter
}

const (
	maxEarlyRecords = 16 << 10
	maxEarlyBytes   = 32 << 20
)

// advance records that every group up to id is applied and wakes the
// readers waiting for it. Only the applier calls it, in journal order, so
// the id never goes back.
func (v *visibility) advance(id uint64) {
	v.applied.Store(id)
	v.wake()
}

// wake releases every waiting reader to look again.
func (v *visibility) wake() {
	v.mu.Lock()
	if v.changed != nil {
		close(v.changed)
		v.changed = nil
	}
	v.mu.Unlock()
}

// awaitVisible returns once every append acknowledged before the call is
// visible to reads. It returns the database's failure if one stopped the
// applier short of that (the appends are durable in the journal and the
// next open applies them), or the context's error.
func (p *commitPipeline) awaitVisible(ctx context.Context) error {
	v := &p.vis
	target := v.acked.Load()
	for {
		if v.applied.Load() >= target {
			return nil
		}
		if f := p.env.failed(); f != nil {
			return f
		}
		if v.stopped.Load() {
			return errClosed
		}
		v.mu.Lock()
		if v.applied.Load() >= target || p.env.failed() != nil || v.stopped.Load() {
			v.mu.Unlock()
			continue
		}
		if v.changed == nil {
			v.changed = make(chan struct{})
		}
		ch := v.changed
		v.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// pendingIdem is an idempotency key of a group not yet applied, and the
// group: once that group is acknowledged the key is committed, though the
// index does not hold it yet.
type pendingIdem struct {
	schema.Idem
	group uint64
}
