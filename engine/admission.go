package engine

import (
	"context"
	"sync"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
)

// admission bounds the records and bytes admitted but not yet acknowledged
// (SPEC §8). Past the bound an append waits for room until its context ends
// (CAP_001) or, with RefuseWhenFull, is refused at once (CAP_002). A request
// larger than the whole bound is admitted alone, so no request can wait
// forever. It also gates Close: once closing, nothing new is admitted and
// drain waits for what is in flight.
type admission struct {
	mu       sync.Mutex
	cond     chan struct{} // closed and replaced whenever room is freed
	records  int
	bytes    int64
	maxRecs  int
	maxBytes int64
	waiters  int
	closing  bool
	idle     chan struct{} // closed when closing and nothing is in flight
}

func (a *admission) init(maxRecs int, maxBytes int64) {
	a.maxRecs, a.maxBytes = maxRecs, maxBytes
	a.cond = make(chan struct{})
}

func (a *admission) fits(n int, b int64) bool {
	if a.records == 0 {
		return true
	}
	return a.records+n <= a.maxRecs && a.bytes+b <= a.maxBytes
}

func (a *admission) acquire(ctx context.Context, n int, b int64, refuse bool) error {
	for {
		a.mu.Lock()
		if a.closing {
			a.mu.Unlock()
			return errClosed
		}
		if a.fits(n, b) {
			a.records += n
			a.bytes += b
			a.mu.Unlock()
			return nil
		}
		if refuse {
			recs, bytes := a.records, a.bytes
			a.mu.Unlock()
			return errs.NewRefusal(errs.CodeQueueFull, 10*time.Millisecond,
				"%d records and %d bytes in flight (bounds %d, %d)", recs, bytes, a.maxRecs, a.maxBytes)
		}
		wait := a.cond
		a.waiters++
		a.mu.Unlock()
		select {
		case <-wait:
			a.mu.Lock()
			a.waiters--
			a.mu.Unlock()
		case <-ctx.Done():
			a.mu.Lock()
			a.waiters--
			a.mu.Unlock()
			return &errs.RefusalError{Code: errs.CodeCapacityExhausted, Reason: errs.CodeCapacityExhausted.Reason(),
				Message: "in-flight bound reached and the context ended: " + ctx.Err().Error()}
		}
	}
}

func (a *admission) release(n int, b int64) {
	a.mu.Lock()
	a.records -= n
	a.bytes -= b
	if a.waiters > 0 {
		close(a.cond)
		a.cond = make(chan struct{})
	}
	if a.closing && a.records == 0 && a.idle != nil {
		close(a.idle)
		a.idle = nil
	}
	a.mu.Unlock()
}

// drain stops admission and waits until nothing is in flight.
func (a *admission) drain() {
	a.mu.Lock()
	a.closing = true
	if a.records == 0 {
		a.mu.Unlock()
		return
	}
	idle := make(chan struct{})
	a.idle = idle
	a.mu.Unlock()
	<-idle
}

// inFlight returns the records and bytes admitted and not yet acknowledged.
func (a *admission) inFlight() (int, int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.records, a.bytes
}
