// Package gate is the engine's close gate: it counts the calls under way
// that Close must wait for, and refuses new ones once Close has begun. The
// database has two: admission's (appends and whatever settles through group
// commit, drained before Close settles and stops the applier) and the read
// gate (reads, Verify, CreateSnapshot, drained before Close closes the index
// and the segment files: Pebble panics on a read of a closed database,
// "pebble: closed"). Entering and leaving are one atomic add each.
package gate

import (
	"sync"
	"sync/atomic"
)

// Gate is one close gate. The zero Gate is open, with no call inside.
type Gate struct {
	n       atomic.Int64
	closing atomic.Bool
	mu      sync.Mutex
	idle    chan struct{} // closed when closing and the last call leaves
}

// Enter reports whether a call may go on; each true is paired with Leave.
// It increments before it looks at closing, and Drain sets closing before
// it looks at the count, so either the call sees closing or Drain sees the
// call.
func (g *Gate) Enter() bool {
	g.n.Add(1)
	if g.closing.Load() {
		g.Leave()
		return false
	}
	return true
}

// Leave ends a call that Enter let in.
func (g *Gate) Leave() {
	if g.n.Add(-1) == 0 && g.closing.Load() {
		g.wakeDrain()
	}
}

// Closing reports whether Drain has begun.
func (g *Gate) Closing() bool { return g.closing.Load() }

// Inside returns the number of calls inside the gate.
func (g *Gate) Inside() int64 { return g.n.Load() }

// Drain refuses new calls and returns once every call inside has left.
func (g *Gate) Drain() {
	g.mu.Lock()
	g.closing.Store(true)
	if g.n.Load() == 0 {
		g.mu.Unlock()
		return
	}
	idle := make(chan struct{})
	g.idle = idle
	g.mu.Unlock()
	// The last Leave may have run between the check and idle being set.
	if g.n.Load() == 0 {
		g.wakeDrain()
	}
	<-idle
}

func (g *Gate) wakeDrain() {
	g.mu.Lock()
	if g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
	g.mu.Unlock()
}
