package outbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
)

// Handler delivers one entry. It returns the result to record with the
// completion, or an error: the attempt failed, and is retried under the
// retry policy unless the error is marked Permanent (or it was the last
// attempt). ctx ends when Run stops or when the entry's lease is lost (a
// renewal was refused: another claim took it over); the handler should
// then return soon. A handler that panics fails the attempt.
type Handler func(ctx context.Context, e Entry) (result []byte, err error)

// RunOptions configure Run. The zero value is usable.
type RunOptions struct {
	// Workers is how many handlers run at once. Default 1.
	Workers int
	// LeaseTTL is each lease's time to live; a running handler's lease is
	// renewed every LeaseTTL/3. Default 30 s.
	LeaseTTL time.Duration
	// Batch bounds the entries one claim takes (one append for all of
	// them). Default Workers.
	Batch int
	// PollInterval is how often Run looks for due entries when it found
	// none; an Enqueue on this Outbox wakes it at once. Default 1 s.
	PollInterval time.Duration
	// Worker names this process on its leases. Default "run/HOST/PID".
	Worker string
	// Logger receives the errors Run rides out (a claim or a completion
	// refused by admission, which it retries). Default: none.
	Logger engine.Logger
}

// runRetry is how long Run waits before trying again after an error it
// rides out (CAP_*: the database is busy).
const runRetry = 50 * time.Millisecond

// Run delivers the outbox's entries until ctx ends: it claims due entries
// (in batches, as workers are free), calls handler for each on one of
// Workers goroutines, renews the lease while the handler runs, and
// completes the entry with the handler's result or fails it with its error.
//
// Delivery is at least once: an entry whose handler ran but whose
// completion was not recorded — the process died, the lease was lost —
// is delivered again once its lease expires. Completion is at most once:
// a completion under a lease that is no longer current is refused.
//
// When ctx ends Run stops claiming, cancels the running handlers' contexts
// and waits for them. A handler that still returns a result is completed;
// one that returns ctx's error leaves its entry inflight, to be claimed
// again when its lease expires (the attempt counts). Run returns nil then,
// or the error that stopped it: the outbox or the database closed or
// failed (IO_001), a bad option (INPUT_001).
func (o *Outbox) Run(ctx context.Context, handler Handler, ro RunOptions) error {
	if handler == nil {
		return errs.New(errs.CodeInvalidInput, "outbox Run needs a handler")
	}
	if ro.Workers == 0 {
		ro.Workers = 1
	}
	if ro.LeaseTTL == 0 {
		ro.LeaseTTL = 30 * time.Second
	}
	if ro.Batch == 0 {
		ro.Batch = ro.Workers
	}
	if ro.PollInterval == 0 {
		ro.PollInterval = time.Second
	}
	if ro.Worker == "" {
		host, _ := os.Hostname()
		ro.Worker = fmt.Sprintf("run/%s/%d", host, os.Getpid())
	}
	switch {
	case ro.Workers < 0 || ro.Workers > 1<<16:
		return errs.New(errs.CodeInvalidInput, "Run: %d workers (must be 1..65536)", ro.Workers)
	case ro.Batch < 0 || ro.Batch > MaxClaim:
		return errs.New(errs.CodeInvalidInput, "Run: batch of %d (must be 1..%d)", ro.Batch, MaxClaim)
	case ro.PollInterval < 0:
		return errs.New(errs.CodeInvalidInput, "Run: negative poll interval")
	}
	if err := checkTTL(ro.LeaseTTL); err != nil {
		return err
	}

	jobs := make(chan Entry)
	done := make(chan struct{}, ro.Workers)
	var wg sync.WaitGroup
	for range ro.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range jobs {
				o.deliver(ctx, handler, e, &ro)
				done <- struct{}{}
			}
		}()
	}
	err := o.dispatch(ctx, jobs, done, &ro)
	close(jobs)
	wg.Wait()
	if ctx.Err() != nil && (err == nil || errors.Is(err, ctx.Err())) {
		return nil
	}
	return err
}

// dispatch claims entries as workers are free and hands them out, until
// ctx ends or an error it cannot ride out.
func (o *Outbox) dispatch(ctx context.Context, jobs chan<- Entry, done <-chan struct{}, ro *RunOptions) error {
	free := ro.Workers
	timer := time.NewTimer(0)
	defer timer.Stop()
	wait := func(d time.Duration) {
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(d)
		select {
		case <-ctx.Done():
		case <-done:
			free++
		case <-o.notifyCh:
		case <-timer.C:
		}
	}
	for ctx.Err() == nil {
		for drained := false; !drained; {
			select {
			case <-done:
				free++
			default:
				drained = true
			}
		}
		if free == 0 {
			select {
			case <-ctx.Done():
			case <-done:
				free++
			}
			continue
		}
		es, err := o.Claim(ctx, ro.Worker, min(free, ro.Batch), ro.LeaseTTL)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !ridable(err) {
				return err
			}
			if ro.Logger != nil {
				ro.Logger.Errorf("outbox %q: claim: %v", o.name, err)
			}
			wait(runRetry)
			continue
		}
		for _, e := range es {
			jobs <- e
			free--
		}
		if len(es) == 0 {
			wait(ro.PollInterval)
		}
	}
	return nil
}

// ridable reports whether Run waits and tries again after err: an
// admission refusal (the database is busy).
func ridable(err error) bool {
	return strings.HasPrefix(string(engine.CodeOf(err)), "CAP_")
}

// deliver runs the handler for one claimed entry, renewing its lease while
// it runs, and records the outcome.
func (o *Outbox) deliver(ctx context.Context, handler Handler, e Entry, ro *RunOptions) {
	lease := *e.Lease
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var lost bool
	stopRenew := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		t := time.NewTicker(max(ro.LeaseTTL/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-stopRenew:
				return
			case <-t.C:
			}
			l, err := o.Extend(context.WithoutCancel(ctx), lease, ro.LeaseTTL)
			if err == nil {
				continue // the token stays the same
			}
			var se *StateError
			if errors.As(err, &se) || !ridable(err) {
				lost = true // another claim took it over, or the outbox stopped
				cancel()
				return
			}
			_ = l
		}
	}()
	result, herr := callHandler(hctx, handler, e)
	close(stopRenew)
	<-renewed
	if lost {
		return
	}
	if herr != nil && ctx.Err() != nil && errors.Is(herr, ctx.Err()) {
		return // stopping: the lease runs out and the entry comes back
	}
	// The outcome is recorded even while Run stops: the work is done.
	wctx := context.WithoutCancel(ctx)
	for try := 0; ; try++ {
		var err error
		if herr == nil {
			_, err = o.Complete(wctx, lease, result)
		} else {
			_, err = o.Fail(wctx, lease, herr)
		}
		if err == nil || !ridable(err) || try >= 100 {
			if err != nil && ro.Logger != nil && !isStateErr(err) {
				ro.Logger.Errorf("outbox %q: recording the outcome of %q: %v", o.name, e.ID, err)
			}
			return
		}
		time.Sleep(runRetry)
	}
}

func isStateErr(err error) bool {
	var se *StateError
	return errors.As(err, &se)
}

// callHandler calls h, turning a panic into an error.
func callHandler(ctx context.Context, h Handler, e Entry) (result []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return h(ctx, e)
}
