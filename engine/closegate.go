package engine

import (
	"context"
	"sync"
	"sync/atomic"
)

// closeGate counts the calls under way that Close must wait for, and
// refuses new ones once Close has begun. The database has two: admission's
// (appends and whatever settles through group commit, drained before Close
// settles and stops the applier) and the read gate (reads, Verify,
// CreateSnapshot, drained before Close closes the index and the segment
// files: Pebble panics on a read of a closed database, "pebble: closed").
// Entering and leaving are one atomic add each.
type closeGate struct {
	n       atomic.Int64
	closing atomic.Bool
	mu      sync.Mutex
	idle    chan struct{} // closed when closing and the last call leaves
}

// enter reports whether a call may go on; each true is paired with leave.
// It increments before it looks at closing, and drain sets closing before
// it looks at the count, so either the call sees closing or drain sees the
// call.
func (g *closeGate) enter() bool {
	g.n.Add(1)
	if g.closing.Load() {
		g.leave()
		return false
	}
	return true
}

func (g *closeGate) leave() {
	if g.n.Add(-1) == 0 && g.closing.Load() {
		g.wakeDrain()
	}
}

// isClosing reports whether drain has begun.
func (g *closeGate) isClosing() bool { return g.closing.Load() }

// drain refuses new calls and returns once every call inside has left.
func (g *closeGate) drain() {
	g.mu.Lock()
	g.closing.Store(true)
	if g.n.Load() == 0 {
		g.mu.Unlock()
		return
	}
	idle := make(chan struct{})
	g.idle = idle
	g.mu.Unlock()
	// The last leave may have run between the check and idle being set.
	if g.n.Load() == 0 {
		g.wakeDrain()
	}
	<-idle
}

func (g *closeGate) wakeDrain() {
	g.mu.Lock()
	if g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
	g.mu.Unlock()
}

// beginRead enters the read gate and waits until every append acknowledged
// before the call is visible (awaitVisible). A nil error is paired with
// endRead. A range loop that began a read holds Close until the loop ends.
func (db *DB) beginRead(ctx context.Context) error {
	if db.filesOnly() {
		return db.ro.noIndex // a read-only open without the index (readonly.go)
	}
	if !db.reads.enter() {
		return errClosed
	}
	if err := db.awaitVisible(ctx); err != nil {
		db.reads.leave()
		return err
	}
	return nil
}

// endRead leaves the read gate.
func (db *DB) endRead() { db.reads.leave() }
