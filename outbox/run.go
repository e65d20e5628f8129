package outbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
)

// Handler delivers one entry. It returns the result to record with the
// completion (at most Options.MaxPayload bytes: a larger one cannot be
// recorded, and fails the attempt permanently, saying so), or an error:
// the attempt failed, and is retried under the retry policy unless the
// error is marked Permanent (or it was the last attempt). ctx ends when Run stops or when the entry's lease is lost (a
// renewal was refused: another claim took it over); the handler should
// then return soon. A handler that panics fails the attempt.
type Handler func(ctx context.Context, e Entry) (result []byte, err error)

// RunOptions configure Run. The zero value is usable.
type RunOptions struct {
	// Workers is how many handlers run at once. Default 1.
	Workers int
	// LeaseTTL is each lease's time to live; the leases Run holds are
	// renewed every LeaseTTL/3. Default 30 s.
	LeaseTTL time.Duration
	// Batch bounds the entries one claim takes (one append for all of
	// them); Run holds at most Workers+2·Batch claimed entries, the ones no
	// worker has started waiting their turn, so that the next claim's
	// fsync overlaps the last completions'. With short handlers a claim
	// and a completion (an fsync each) are most of an entry's time, so
	// entries claimed ahead keep the workers busy. Default
	// max(2·Workers, 64), at most MaxClaim.
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

// maxFinishBatch bounds the outcomes Run records in one append.
const maxFinishBatch = 1000

// Run delivers the outbox's entries until ctx ends. It claims due entries
// in batches, as workers become free; calls handler for each on one of
// Workers goroutines; renews the leases it holds every LeaseTTL/3 (all of
// them in one append); and records the outcomes — a completion with the
// handler's result, or a failure with its error — in batches too, so a
// worker takes its next entry without waiting for the last one's fsync.
//
// Delivery is at least once: an entry whose handler ran but whose
// completion was not recorded — the process died, the lease was lost — is
// delivered again once its lease expires. Completion is at most once: an
// outcome under a lease that is no longer current is refused and dropped.
//
// When ctx ends Run stops claiming, cancels the running handlers' contexts
// and waits for them, and records what they return; an entry whose
// handler returns ctx's error, or that no worker had started, stays
// inflight until its lease expires and is claimed again (the attempt
// counts). Run then returns nil, or the error that stopped it: the outbox
// or the database closed or failed (IO_001), a bad option (INPUT_001).
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
		ro.Batch = min(max(2*ro.Workers, 64), MaxClaim)
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
	if len(ro.Worker) > MaxWorkerBytes || checkPrintable("worker", ro.Worker) != nil {
		return errs.New(errs.CodeInvalidInput, "Run: worker %q: at most %d bytes of UTF-8 without control characters", ro.Worker, MaxWorkerBytes)
	}
	r := &runner{o: o, h: handler, ro: ro, held: map[string]*job{},
		jobs:     make(chan *job, ro.Workers+2*ro.Batch),
		outcomes: make(chan *job, ro.Workers+2*ro.Batch),
		freed:    make(chan struct{}, 1)}
	r.ctx, r.stop = context.WithCancel(ctx)
	defer r.stop()

	var workers, finisher, renewer sync.WaitGroup
	for range ro.Workers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			r.work()
		}()
	}
	finisher.Add(1)
	go func() {
		defer finisher.Done()
		r.finish()
	}()
	renewDone := make(chan struct{})
	renewer.Add(1)
	go func() {
		defer renewer.Done()
		r.renew(renewDone)
	}()

	r.dispatch()
	close(r.jobs)
	workers.Wait()
	close(r.outcomes)
	finisher.Wait()
	close(renewDone)
	renewer.Wait()
	if r.err != nil {
		return r.err
	}
	return nil
}

// runner is one Run.
type runner struct {
	o    *Outbox
	h    Handler
	ro   RunOptions
	ctx  context.Context // ends with Run's ctx or a fatal error
	stop context.CancelFunc

	mu   sync.Mutex
	held map[string]*job // every entry claimed and not finished
	err  error           // the error that stopped Run

	jobs     chan *job
	outcomes chan *job
	freed    chan struct{} // an entry was finished: room to claim
}

// job is one claimed entry.
type job struct {
	e      Entry
	lease  Lease
	ctx    context.Context
	cancel context.CancelFunc
	lost   atomic.Bool // a renewal was refused: another claim took it
	result []byte
	err    error
}

func (r *runner) fatal(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
	r.stop()
}

// dispatch claims entries while there is room and hands them to the
// workers, until the run ends.
func (r *runner) dispatch() {
	limit := r.ro.Workers + 2*r.ro.Batch
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	wait := func(d time.Duration, poll bool) {
		timer.Reset(d)
		var notify <-chan struct{}
		if poll {
			notify = r.o.notifyCh
		}
		select {
		case <-r.ctx.Done():
		case <-r.freed:
		case <-notify:
		case <-timer.C:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
	for r.ctx.Err() == nil {
		r.mu.Lock()
		room := limit - len(r.held)
		r.mu.Unlock()
		if room <= 0 {
			wait(time.Hour, false)
			continue
		}
		es, err := r.o.Claim(r.ctx, r.ro.Worker, min(room, r.ro.Batch), r.ro.LeaseTTL)
		if err != nil {
			if r.ctx.Err() != nil {
				return
			}
			if !ridable(err) {
				r.fatal(err)
				return
			}
			if r.ro.Logger != nil {
				r.ro.Logger.Errorf("outbox %q: claim: %v", r.o.name, err)
			}
			wait(runRetry, false)
			continue
		}
		for i := range es {
			j := &job{e: es[i], lease: *es[i].Lease}
			j.ctx, j.cancel = context.WithCancel(r.ctx)
			r.mu.Lock()
			if prev := r.held[j.lease.ID]; prev != nil {
				// This run held the entry under a lease that expired, and
				// has claimed it again: the earlier lease is lost.
				prev.lost.Store(true)
				prev.cancel()
			}
			r.held[j.lease.ID] = j
			r.mu.Unlock()
			r.jobs <- j // room for every held job
		}
		if len(es) == 0 {
			wait(r.ro.PollInterval, true)
		}
	}
}

// work runs handlers until the jobs end. A job not started when the run
// ends is left to its lease.
func (r *runner) work() {
	for j := range r.jobs {
		if r.ctx.Err() != nil || j.lost.Load() {
			j.cancel()
			continue
		}
		j.result, j.err = callHandler(j.ctx, r.h, j.e)
		j.cancel()
		r.outcomes <- j
	}
}

// finish records the outcomes, many at a time, until the outcomes end.
func (r *runner) finish() {
	// The outcomes are recorded even while the run stops: the work is done.
	ctx := context.WithoutCancel(r.ctx)
	batch := make([]*job, 0, maxFinishBatch)
	for j := range r.outcomes {
		batch = append(batch[:0], j)
	drain:
		for len(batch) < maxFinishBatch {
			select {
			case j, ok := <-r.outcomes:
				if !ok {
					break drain
				}
				batch = append(batch, j)
			default:
				break drain
			}
		}
		var outs []outcome
		var which []*job
		for _, j := range batch {
			stopping := j.err != nil && r.ctx.Err() != nil && errors.Is(j.err, r.ctx.Err())
			if j.lost.Load() || stopping {
				continue // another claim has it, or its lease runs out
			}
			outs = append(outs, outcome{lease: j.lease, result: j.result, err: j.err})
			which = append(which, j)
		}
		for try := 0; len(outs) > 0; try++ {
			errs := r.o.finishBatch(ctx, outs)
			var again []outcome
			var againJobs []*job
			for i, err := range errs {
				switch {
				case err == nil, isStateErr(err):
				case ridable(err) && try < 100:
					again = append(again, outs[i])
					againJobs = append(againJobs, which[i])
				default:
					if r.ro.Logger != nil {
						r.ro.Logger.Errorf("outbox %q: recording the outcome of %q: %v", r.o.name, outs[i].lease.ID, err)
					}
					if !ridable(err) {
						r.fatal(err)
					}
				}
			}
			outs, which = again, againJobs
			if len(outs) > 0 {
				time.Sleep(runRetry)
			}
		}
		r.mu.Lock()
		for _, j := range batch {
			// Not a later claim of the same entry, which may be running.
			if r.held[j.lease.ID] == j {
				delete(r.held, j.lease.ID)
			}
		}
		r.mu.Unlock()
		select {
		case r.freed <- struct{}{}:
		default:
		}
	}
}

// renew extends every held lease every LeaseTTL/3, in one append, until
// done. A lease whose renewal is refused is lost: its handler's context is
// cancelled and its outcome dropped.
func (r *runner) renew(done <-chan struct{}) {
	t := time.NewTicker(max(r.ro.LeaseTTL/3, time.Millisecond))
	defer t.Stop()
	ctx := context.WithoutCancel(r.ctx)
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		r.mu.Lock()
		jobs := make([]*job, 0, len(r.held))
		for _, j := range r.held {
			jobs = append(jobs, j)
		}
		r.mu.Unlock()
		for len(jobs) > 0 {
			n := min(len(jobs), maxFinishBatch)
			ls := make([]Lease, n)
			for i, j := range jobs[:n] {
				ls[i] = j.lease
			}
			for i, err := range r.o.extendBatch(ctx, ls, r.ro.LeaseTTL) {
				if err != nil && !ridable(err) {
					jobs[i].lost.Store(true)
					jobs[i].cancel()
				}
			}
			jobs = jobs[n:]
		}
	}
}

// ridable reports whether Run waits and tries again after err: an
// admission refusal (the database is busy).
func ridable(err error) bool {
	return strings.HasPrefix(string(engine.CodeOf(err)), "CAP_")
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
