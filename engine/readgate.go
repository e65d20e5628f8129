package engine

import (
	"context"
	"sync"
	"sync/atomic"
)

// readGate counts the reads in progress against the index and the segment
// files, so that Close closes them only once those reads are done: Pebble
// panics on a read of a closed database ("pebble: closed"), and a read that
// had passed the closed check when Close began used to take the process
// down. A read enters before it looks at anything and leaves when it
// returns (an iterator when its range loop ends); once Close has begun, a
// new read is refused with IO_001 "database is closed". Close waits for the
// reads already inside, so a range loop held open by its consumer holds
// Close too.
type readGate struct {
	n       atomic.Int64
	closing atomic.Bool
	mu      sync.Mutex
	idle    chan struct{} // closed when closing and the last read leaves
}

// enter reports whether a read may go on; each true is paired with leave.
// It increments before it looks at closing, and drain sets closing before
// it looks at the count, so either the read sees closing or drain sees the
// read.
func (g *readGate) enter() bool {
	g.n.Add(1)
	if g.closing.Load() {
		g.leave()
		return false
	}
	return true
}

func (g *readGate) leave() {
	if g.n.Add(-1) == 0 && g.closing.Load() {
		g.mu.Lock()
		if g.idle != nil {
			close(g.idle)
			g.idle = nil
		}
		g.mu.Unlock()
	}
}

// drain refuses new reads and returns once every read inside has left.
func (g *readGate) drain() {
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
		g.mu.Lock()
		if g.idle != nil {
			close(g.idle)
			g.idle = nil
		}
		g.mu.Unlock()
	}
	<-idle
}

// beginRead enters the read gate and waits until every append acknowledged
// before the call is visible (awaitVisible). A nil error is paired with
// endRead.
func (db *DB) beginRead(ctx context.Context) error {
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
