// Package admission bounds the records and bytes admitted but not yet
// acknowledged (docs/CONTRACT.md §8), per database and optionally per
// anchor. Past a bound an append waits for room until its context ends
// (CAP_001) or, with refuse, is refused at once (CAP_002). A request larger
// than a whole bound is admitted alone, so no request can wait forever. An
// optional per-anchor token bucket refuses appends beyond a rate (CAP_003)
// at once. Every refusal is an *errs.RefusalError carrying the capacity
// state and, for the rate limit, how long to wait (RetryAfter).
//
// It also gates Close: once closing, nothing new is admitted and Drain
// waits for what is in flight (engine/internal/gate).
//
// Duplicates never get here: the engine answers an append whose idempotency
// key is already committed before admission, and leaves out of the
// request's cost every entry whose key is committed or in flight.
package admission

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anchordb/anchordb/engine/internal/gate"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/humanize"
)

// ErrClosed is the refusal of a call made once Close has begun: WRITE_001,
// "database is closed". The engine returns this same value, so errors.Is
// matches it wherever it comes from.
var ErrClosed = errs.New(errs.CodeWriteFailed, "database is closed")

// Config sets the bounds and the rate limit (the engine's Options of the
// same meaning).
type Config struct {
	MaxRecords int   // records in flight (MaxInFlightRecords)
	MaxBytes   int64 // bytes in flight (MaxInFlightBytes)
	PerAnchor  int   // records in flight for one anchor; 0: no bound (MaxInFlightPerAnchor)
	// Rate is each anchor's records a second, up to Burst (AnchorRate,
	// AnchorBurst); 0 is no rate limit. A Burst below 1 is max(1, Rate).
	Rate  float64
	Burst int
	Clock func() time.Time // the rate limit's clock; need not be monotonic
	// Disabled skips every bound and the rate limit; only the close gate
	// remains (DisableAdmission, for measuring the layer's cost).
	Disabled bool
}

// Controller is one database's admission: its bounds, its rate limit's
// buckets, its refusal counts and its close gate. Its methods are safe for
// concurrent use.
type Controller struct {
	mu       sync.Mutex
	cond     chan struct{} // closed and replaced whenever room is freed
	records  int
	bytes    int64
	maxRecs  int
	maxBytes int64
	waiters  int
	queue    []*waiter // requests waiting for room, in arrival order

	// perAnchor, when > 0, bounds the records in flight for one anchor;
	// anchorRecs holds the anchors that have some (entries are deleted at 0,
	// so it stays as small as what is in flight).
	perAnchor  int
	anchorRecs map[string]int

	// The rate limit: rate tokens a second, up to burst, per anchor.
	rate    float64
	burst   float64
	now     func() time.Time
	buckets map[string]*bucket // none for an anchor means a full bucket
	sweepAt int                // sweep full buckets when there are more

	// disabled skips every bound (Config.Disabled, for measuring the
	// layer's cost): only the close gate remains.
	disabled bool
	gate     gate.Gate // what Close waits for: everything admitted, and Enter's callers

	refused [3]atomic.Uint64 // CAP_001, CAP_002, CAP_003
}

// bucket is one anchor's token bucket.
type bucket struct {
	tokens float64
	at     time.Time
}

// New returns a Controller with c's bounds, open, with nothing in flight.
func New(c Config) *Controller {
	a := &Controller{}
	a.maxRecs, a.maxBytes = c.MaxRecords, c.MaxBytes
	a.perAnchor = c.PerAnchor
	a.anchorRecs = make(map[string]int)
	a.rate, a.burst = c.Rate, float64(c.Burst)
	if a.rate > 0 && a.burst < 1 {
		a.burst = max(1, a.rate)
	}
	a.now = c.Clock
	a.buckets = make(map[string]*bucket)
	a.sweepAt = minSweep
	a.disabled = c.Disabled
	a.cond = make(chan struct{})
	return a
}

// Cost is what one request asks of admission: its records and bytes, and
// its records per anchor. Entries that are duplicates are not in it.
type Cost struct {
	Records int
	Bytes   int64
	Anchors map[string]int // nil: no per-anchor bound or rate limit applies
	// Free marks the entries known to be duplicates before admission (nil:
	// none). Admission does not read it: it rides with the cost for the
	// caller, which refunds the tokens of the other duplicates afterwards.
	Free []bool
}

// fits reports whether c fits under the database's bounds now and, if it
// does, which anchor of c is at its per-anchor bound ("" none; the
// byte-smallest when several are). a.mu is held.
func (a *Controller) fits(c *Cost) (global bool, anchor string) {
	if a.records > 0 && (a.records+c.Records > a.maxRecs || a.bytes+c.Bytes > a.maxBytes) {
		return false, ""
	}
	if a.perAnchor > 0 {
		for id, n := range c.Anchors {
			if have := a.anchorRecs[id]; have > 0 && have+n > a.perAnchor && (anchor == "" || id < anchor) {
				anchor = id
			}
		}
	}
	return true, anchor
}

// Acquire admits c or returns why not: a refusal (CAP_001 when ctx ends
// while it waits, CAP_002 at once with refuse, CAP_003 for the rate limit)
// or ErrClosed once Close has begun. Each nil is paired with Release(c). It takes the rate limit's tokens
// first (refusing at once when an anchor has too few), then waits for room
// under the bounds; a request that is refused or gives up returns its tokens.
//
// Requests waiting for the database's bounds are served in arrival order
// (a.queue): while one waits, a later request does not get in ahead of it
// even when it would fit (it waits behind, or is refused with refuse).
// Without that a large request, which needs room that a stream of small
// ones never leaves, waited until its context ended. A request held back
// only by its anchor's bound does not hold the queue: it steps out and
// lets the others by, so one busy anchor does not stall the rest.
func (a *Controller) Acquire(ctx context.Context, c *Cost, refuse bool) error {
	if a.disabled || c.Records == 0 {
		// Only the gate: a request with no record to append (duplicates)
		// costs nothing, but Close must wait for it.
		return a.Enter()
	}
	if err := a.takeTokens(c); err != nil {
		return err
	}
	var me *waiter // this request's place in a.queue once it waits
	for {
		a.mu.Lock()
		global, anchor := a.fits(c)
		ahead := len(a.queue) > 0 && a.queue[0] != me
		if global && anchor == "" && !ahead && a.gate.Enter() {
			a.records += c.Records
			a.bytes += c.Bytes
			for id, n := range c.Anchors {
				a.anchorRecs[id] += n
			}
			a.leaveQueue(me)
			a.mu.Unlock()
			return nil
		}
		if a.gate.Closing() {
			a.leaveQueue(me)
			a.mu.Unlock()
			a.ReturnTokens(c.Anchors)
			return ErrClosed
		}
		why := "in-flight bound reached"
		if global && anchor == "" {
			why = fmt.Sprintf("%d requests wait for room ahead of this one", len(a.queue))
		}
		if refuse {
			e := a.refusal(errs.CodeQueueFull, 10*time.Millisecond, anchor, why)
			a.mu.Unlock()
			a.ReturnTokens(c.Anchors)
			return e
		}
		switch {
		case !global && me == nil:
			me = &waiter{}
			a.queue = append(a.queue, me)
		case global && !ahead && me != nil:
			// First in line with room, held back by its anchor alone.
			a.leaveQueue(me)
			me = nil
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
			a.leaveQueue(me)
			e := a.refusal(errs.CodeCapacityExhausted, 0, anchor, why+" and the context ended: "+ctx.Err().Error())
			a.mu.Unlock()
			a.ReturnTokens(c.Anchors)
			return e
		}
	}
}

// waiter is a request's place in the queue of those waiting for room.
type waiter struct{}

// leaveQueue takes w (nil: not queued) out of the queue, and wakes the
// waiters so that the next in line looks again. a.mu is held.
func (a *Controller) leaveQueue(w *waiter) {
	if w == nil {
		return
	}
	if i := slices.Index(a.queue, w); i >= 0 {
		a.queue = slices.Delete(a.queue, i, i+1)
	}
	a.wake()
}

// wake wakes every waiter to look at the bounds again; a.mu is held.
func (a *Controller) wake() {
	if a.waiters > 0 {
		close(a.cond)
		a.cond = make(chan struct{})
	}
}

// Enter holds Close off without admitting anything: for calls that settle
// through group commit (Sync, Compact, Ingest; CreateCheckpoint through
// Sync), which Close must let finish before it stops the applier. Each nil
// is paired with LeaveGate; once Close has begun it returns ErrClosed.
func (a *Controller) Enter() error {
	if !a.gate.Enter() {
		return ErrClosed
	}
	return nil
}

// refusal builds a refusal with the capacity state; anchor, if not "",
// is the anchor at its per-anchor bound (the bound that refused). a.mu is
// held.
func (a *Controller) refusal(code errs.Code, retry time.Duration, anchor, msg string) *errs.RefusalError {
	a.count(code)
	var e *errs.RefusalError
	if anchor != "" {
		e = errs.NewRefusal(code, retry, "%s: anchor %q has %d records in flight (bound %d per anchor)", msg, anchor, a.anchorRecs[anchor], a.perAnchor)
		e.Anchor = anchor
	} else {
		e = errs.NewRefusal(code, retry, "%s: %s and %s in flight (bounds %d records, %d bytes)", msg, humanize.Plural(a.records, "record"), humanize.Plural(a.bytes, "byte"), a.maxRecs, a.maxBytes)
	}
	a.withState(e)
	return e
}

// withState records the capacity state in a refusal, as every refusal
// carries it (DESIGN.md, "Admission"); a.mu is held.
func (a *Controller) withState(e *errs.RefusalError) {
	e.InFlightRecords, e.InFlightBytes, e.MaxRecords, e.MaxBytes = a.records, a.bytes, a.maxRecs, a.maxBytes
}

func (a *Controller) count(code errs.Code) {
	switch code {
	case errs.CodeCapacityExhausted:
		a.refused[0].Add(1)
	case errs.CodeQueueFull:
		a.refused[1].Add(1)
	case errs.CodeRateLimited:
		a.refused[2].Add(1)
	}
}

// takeTokens takes one token per record from each anchor's bucket, all or
// none. Refused, it names the anchor that waits longest for its tokens,
// with that wait: a batch over several anchors must wait for the slowest.
func (a *Controller) takeTokens(c *Cost) error {
	if a.rate <= 0 {
		return nil
	}
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	var (
		short string // the anchor that waits longest, if any
		wait  time.Duration
		left  float64
	)
	for id, n := range c.Anchors {
		b := a.refill(id, now)
		need := float64(n)
		if b.tokens >= need {
			continue
		}
		if need > a.burst {
			// More than the bucket ever holds: admitted when it is full,
			// leaving it in debt, so a large batch is slowed, not barred.
			if b.tokens >= a.burst {
				continue
			}
			// NB: the burst, not int(burst): the default burst
			// max(1, rate) may be fractional, and the request waits for
			// all of it.
			need = a.burst
		}
		w := retryAfter(need, b.tokens, a.rate)
		if short == "" || w > wait || w == wait && id < short {
			short, wait, left = id, w, b.tokens
		}
	}
	if short != "" {
		// A refusal leaves nothing behind: not the full buckets it made.
		for id := range c.Anchors {
			if a.buckets[id].tokens >= a.burst {
				delete(a.buckets, id)
			}
		}
		e := errs.NewRefusal(errs.CodeRateLimited, wait, "anchor %q is limited to %g records/s (burst %g); %.2f tokens left",
			short, a.rate, a.burst, left)
		e.Anchor = short
		a.withState(e)
		a.count(errs.CodeRateLimited)
		return e
	}
	for id, n := range c.Anchors {
		a.buckets[id].tokens -= float64(n)
	}
	if len(a.buckets) > a.sweepAt {
		// Forget the buckets that are full again, as a new one would be:
		// the map holds the anchors that appended lately, not every
		// anchor since Open. Amortized, each bucket is looked at once or
		// twice per doubling.
		for id := range a.buckets {
			if a.refill(id, now).tokens >= a.burst {
				delete(a.buckets, id)
			}
		}
		a.sweepAt = max(minSweep, 2*len(a.buckets))
	}
	return nil
}

// minSweep is the number of buckets below which none is swept.
const minSweep = 1024

// retryAfter is how long a bucket holding have tokens takes to hold need
// at rate tokens a second, so that waiting it is enough: rounded up to the
// next nanosecond, and one more for the rounding of the float arithmetic
// in refill (truncated, 1/3 s at 3 tokens a second left a retry 1e-9 of a
// token short, refused again). A wait past the longest Duration (a rate
// below about 1e-10 a second) is the longest Duration: converting the
// float would give a negative one.
func retryAfter(need, have, rate float64) time.Duration {
	ns := math.Ceil((need-have)/rate*float64(time.Second)) + 1
	if ns >= math.MaxInt64 { // float64(MaxInt64) is 2^63, one past it
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// refill brings an anchor's bucket up to now; a.mu is held.
func (a *Controller) refill(id string, now time.Time) *bucket {
	b := a.buckets[id]
	if b == nil {
		b = &bucket{tokens: a.burst, at: now}
		a.buckets[id] = b
		return b
	}
	// NB: a clock that stepped back (Config.Clock need not be monotonic)
	// counts as no time passing, and the bucket refills from the new time
	// on: keeping the old time would refuse the anchor until the clock
	// came back to it, with a RetryAfter that promised much less.
	if dt := now.Sub(b.at); dt > 0 {
		b.tokens = min(a.burst, b.tokens+dt.Seconds()*a.rate)
	}
	b.at = now
	return b
}

// ReturnTokens gives back the tokens of records that were not appended (a
// refusal after the tokens were taken, or entries that turned out to be
// duplicates of a concurrent append).
func (a *Controller) ReturnTokens(anchors map[string]int) {
	if a.rate <= 0 || len(anchors) == 0 {
		return
	}
	a.mu.Lock()
	for id, n := range anchors {
		if b := a.buckets[id]; b != nil {
			if b.tokens += float64(n); b.tokens >= a.burst {
				delete(a.buckets, id) // full: the same as none
			}
		}
	}
	a.mu.Unlock()
}

// Tokens returns an anchor's tokens now (for tests and stats); 0 without
// a rate limit.
func (a *Controller) Tokens(id string) float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.rate <= 0 {
		return 0
	}
	return a.refill(id, a.now()).tokens
}

// Release gives back the room c took and leaves the gate: the request
// Acquire admitted is acknowledged (or failed).
func (a *Controller) Release(c *Cost) {
	if a.disabled || c.Records == 0 {
		a.LeaveGate()
		return
	}
	a.mu.Lock()
	a.records -= c.Records
	a.bytes -= c.Bytes
	for id, n := range c.Anchors {
		if left := a.anchorRecs[id] - n; left > 0 {
			a.anchorRecs[id] = left
		} else {
			delete(a.anchorRecs, id)
		}
	}
	a.wake()
	a.mu.Unlock()
	a.LeaveGate()
}

// LeaveGate ends a call that Enter let in.
func (a *Controller) LeaveGate() { a.gate.Leave() }

// Closing reports whether Close has begun (Drain was called).
func (a *Controller) Closing() bool { return a.gate.Closing() }

// Drain stops admission and waits until nothing is in flight.
func (a *Controller) Drain() { a.gate.Drain() }

// InFlight returns the records and bytes admitted and not yet acknowledged.
func (a *Controller) InFlight() (int, int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.records, a.bytes
}

// Disabled reports whether the bounds and the rate limit are off
// (Config.Disabled): every request is admitted, only the gate counts it.
func (a *Controller) Disabled() bool { return a.disabled }

// RateLimited reports whether a per-anchor rate limit is set.
func (a *Controller) RateLimited() bool { return a.rate > 0 }

// Refused records a refusal made outside admission (the engine refuses an
// append while a segment write waits for a file descriptor): it fills in
// the capacity state, as every refusal carries it, and counts it under its
// code.
func (a *Controller) Refused(e *errs.RefusalError) {
	a.mu.Lock()
	a.withState(e)
	a.mu.Unlock()
	a.count(e.Code)
}

// Counts returns the refusals since New, by code: CAP_001 (capacity
// exhausted), CAP_002 (queue full), CAP_003 (rate limited).
func (a *Controller) Counts() (capacity, queue, rate uint64) {
	return a.refused[0].Load(), a.refused[1].Load(), a.refused[2].Load()
}
