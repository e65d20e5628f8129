package engine

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/journal"
	"github.com/anchordb/anchordb/segment"
)

// Group commit.
//
// Appends are committed by a leader: the first caller to find no commit in
// progress becomes the leader and commits everything queued — its own request
// and any that arrived — as one group. The leader validates the group,
// assigns seqs and counters, hashes and frames the records, and writes the
// whole group to the journal in one write (see internal/journal). Then it
// hands leadership to the oldest queued request, so the next group is built
// while this one syncs.
//
// The rest happens in order, group after group: one fdatasync of the
// journal covering every waiting group, after which the syncer wakes their
// callers ("Acknowledged before applied", below), then in the applier for
// each group its segment writes (one per anchor) and its index batch. A NoSync group needs no
// fsync: with no durable group ahead of it, its leader acknowledges it at
// once and the applier applies it behind (handOff).
//
// 1,000 anchors written by 64 goroutines cost one fdatasync per group, not
// one per anchor (SPEC §3): segment files are fsynced later, when settled.

// commitEnv is what the commit pipeline needs of the database. The
// pipeline (queue and leadership, the syncer, the applier's turn and
// visibility) is this file; the database's side is group.go (build) and
// apply.go (apply). Tests give it a fake env and run it without a DB.
type commitEnv struct {
	// build runs in the leader, one group at a time, in journal order: it
	// validates and places reqs, writes the group's journal block and
	// returns the group with id set. Groups are numbered from 1.
	build func(id uint64, reqs []*request) *group
	// syncTo makes the journal durable through end. It runs in the syncer.
	syncTo func(end journal.Pos) error
	// apply applies written (and, if durable, synced) groups in journal
	// order: in the applier, or in a leader applying its group inline with
	// nothing in flight.
	apply func(groups []*group)
	// release returns a group to its pool once every request is complete.
	release func(g *group)
	// failed returns why writes stopped, or nil.
	failed func() error
	// fail stops writes and returns the error every later write gets.
	fail func(err error) error
	// beforeApply, when set (by tests, before the first append), runs in
	// the applier before each round of groups is applied.
	beforeApply func()
}

// commitPipeline is group commit: the queue and leadership, the syncer and
// the applier goroutines, and what is visible to reads.
type commitPipeline struct {
	env     commitEnv
	leader  committer
	applier applier
	vis     visibility
	stop    chan struct{} // closed by close: the syncer and the applier end
	done    sync.WaitGroup
}

// committer is the queue of requests and who leads.
type committer struct {
	mu      sync.Mutex
	queue   []*request
	leading bool
	built   uint64 // groups built; owned by the leader
}

// newCommitPipeline returns a pipeline over env; start runs its goroutines.
func newCommitPipeline(env commitEnv) *commitPipeline {
	p := &commitPipeline{}
	p.init(env)
	return p
}

// init readies a zero pipeline to run over env.
func (p *commitPipeline) init(env commitEnv) {
	p.env = env
	p.stop = make(chan struct{})
	p.applier.signal = make(chan struct{}, 1)
	p.applier.ready = make(chan struct{}, 1)
}

// start runs the syncer and the applier.
func (p *commitPipeline) start() {
	p.done.Add(2)
	go p.runSyncer()
	go p.runApplier()
}

// close stops the syncer and the applier once the appends in flight are
// complete (the caller has drained them), and releases every reader still
// waiting for an apply.
func (p *commitPipeline) close() {
	close(p.stop)
	p.done.Wait()
	p.vis.stopped.Store(true)
	p.vis.wake() // a read still waiting for the applier waits no longer
}

// request is one caller's append (one or more records, atomic together) or a
// settle mark.
type request struct {
	entries  []Entry
	verbatim []segment.Record // ingested records, appended as they are
	sync     bool
	receipts []Receipt
	err      error

	// settle marks rotate the journal in the leader and capture, in the
	// applier, what the settler must fsync.
	settle *settleMark

	wake chan struct{} // buffered(1): leadership handed over, or done
	lead bool          // set before wake when the request must lead

	journalBytes int64 // what it adds to its group's journal block, at most
}

// maxGroupJournalBytes bounds the journal block of one commit group: a
// leader takes queued requests up to it (and always at least one), leaving
// the rest to the next. Without it, admission off, concurrent batches near
// MaxBatchBytes could make a block longer than journal.MaxPayload, which
// recovery would take for damage. One request alone stays below that: at
// most MaxBatchBytes counted with RecordOverhead per record, which is at
// least a quarter of the record's journal bytes. A variable for tests.
var maxGroupJournalBytes int64 = 512 << 20

// journalSize returns what the request's records take in a journal block:
// per record its anchor, where its frame goes, and the frame.
func (r *request) journalSize() int64 {
	var n int64
	for i := range r.entries {
		e := &r.entries[i]
		rec := segment.Record{Type: e.Type, Key: e.Key, Value: e.Value, IdempotencyKey: e.IdempotencyKey}
		n += int64(schema.JournalRecordOverhead + len(e.Anchor) + rec.FrameSize())
	}
	for i := range r.verbatim {
		n += int64(schema.JournalRecordOverhead + len(r.verbatim[i].Anchor) + r.verbatim[i].FrameSize())
	}
	return n
}

// takeGroup returns the requests at the head of queue whose journal bytes
// fit maxGroupJournalBytes (at least one), and the rest.
func takeGroup(queue []*request) (group, rest []*request) {
	var n int64
	for i, r := range queue {
		n += r.journalBytes
		if i > 0 && n > maxGroupJournalBytes {
			return queue[:i], queue[i:]
		}
	}
	return queue, nil
}

var requestPool = sync.Pool{New: func() any { return &request{wake: make(chan struct{}, 1)} }}

func newRequest() *request {
	r := requestPool.Get().(*request)
	r.entries, r.verbatim, r.receipts, r.err, r.settle = nil, nil, nil, nil, nil
	r.sync, r.lead = false, false
	return r
}

func freeRequest(r *request) {
	r.entries, r.verbatim, r.receipts, r.settle = nil, nil, nil, nil
	requestPool.Put(r)
}

// commit runs req through group commit and returns when it is complete.
func (p *commitPipeline) commit(req *request) {
	c := &p.leader
	req.journalBytes = req.journalSize()
	c.mu.Lock()
	c.queue = append(c.queue, req)
	if c.leading {
		c.mu.Unlock()
		<-req.wake
		if !req.lead {
			return // applied and completed by the applier
		}
		// Leadership was handed to us; the queue is ours to commit.
	} else {
		c.leading = true
		c.mu.Unlock()
	}
	p.lead(req)
}

// lead commits the queued requests as one group, hands leadership on, and
// returns once self is complete.
func (p *commitPipeline) lead(self *request) {
	c := &p.leader
	c.mu.Lock()
	reqs, rest := takeGroup(c.queue)
	c.queue = append(make([]*request, 0, len(c.queue)), rest...)
	c.mu.Unlock()

	c.built++
	g := p.env.build(c.built, reqs)
	outcome, acked := p.handOff(g)

	// Hand leadership to the oldest queued request, if any.
	c.mu.Lock()
	if len(c.queue) > 0 {
		next := c.queue[0]
		next.lead = true
		next.wake <- struct{}{}
	} else {
		c.leading = false
	}
	c.mu.Unlock()

	switch outcome {
	case appliedInline:
		p.complete(g, self)
		return
	case acknowledgedEarly:
		for _, r := range acked {
			if r != self {
				r.wake <- struct{}{}
			}
		}
		return
	}
	<-self.wake // the syncer or the applier completes the group
}

// complete hands each request of an applied group its outcome and wakes its
// caller (except skip, whose caller is the current goroutine). A request must
// not be touched after its caller is woken: it goes back to the pool. The
// callers of a group acknowledged early are gone already.
func (p *commitPipeline) complete(g *group, skip *request) {
	if g.early {
		p.env.release(g)
		return
	}
	for _, r := range g.reqs {
		if g.err != nil && r.err == nil {
			r.err, r.receipts = g.err, nil
		}
		if r != skip {
			r.wake <- struct{}{}
		}
	}
	p.env.release(g)
}

// applier applies written groups in journal order. Two goroutines share the
// work: the syncer takes every waiting group, fsyncs the journal once for
// all of them and wakes their callers (visibility, below); the applier applies
// synced groups to the segments and the index and wakes the callers the
// syncer left to it. The next fsync runs while the previous groups are
// applied.
type applier struct {
	mu         sync.Mutex
	queue      []*group // written, waiting for the syncer
	syncing    int      // groups the syncer has taken from queue and not yet passed on
	synced     []*group // synced, waiting for the applier
	inFlight   int      // groups queued or being applied
	earlyBytes int      // acknowledged, not yet applied (visibility, below): journal bytes ...
	earlyRecs  int      // ... and records
	signal     chan struct{}
	ready      chan struct{}
}

// handOffOutcome says what became of a group the leader handed off.
type handOffOutcome int

const (
	queued            handOffOutcome = iota // for the syncer: the leader's caller waits
	appliedInline                           // applied by the leader: it completes the group
	acknowledgedEarly                       // written, applied behind: the leader wakes its callers
)

// handOff takes a group its leader has written to the journal. A NoSync
// group is complete once written (its write has reached the OS, SPEC §3):
// with no durable group ahead of it in the syncer, it is acknowledged at
// once and applied behind, like a synced group, so a writer's next group is
// built while the index takes this one; the group's requests are returned
// for the leader to wake. Past the backlog bound it is applied by its
// leader when nothing is ahead of it, so a lone writer never switches
// goroutines. Anything else goes to the syncer.
func (p *commitPipeline) handOff(g *group) (handOffOutcome, []*request) {
	ap := &p.applier
	ap.mu.Lock()
	if !g.sync && len(ap.queue) == 0 && ap.syncing == 0 {
		// Every group ahead of g is synced (in ap.synced or applied), so
		// the acknowledged id may pass them.
		if p.env.failed() == nil && p.ackEarly(g) {
			reqs := g.reqs // the applier may release g once it is unlocked
			ap.synced = append(ap.synced, g)
			ap.inFlight++
			ap.mu.Unlock()
			notify(ap.ready)
			return acknowledgedEarly, reqs
		}
		if ap.inFlight == 0 {
			ap.inFlight++
			ap.mu.Unlock()
			p.env.apply([]*group{g})
			ap.mu.Lock()
			ap.inFlight--
			ap.mu.Unlock()
			return appliedInline, nil
		}
	}
	ap.queue = append(ap.queue, g)
	ap.inFlight++
	ap.mu.Unlock()
	notify(ap.signal)
	return queued, nil
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// runSyncer is the syncer goroutine.
func (p *commitPipeline) runSyncer() {
	defer p.done.Done()
	ap := &p.applier
	for {
		select {
		case <-ap.signal:
		case <-p.stop:
			return
		}
		for {
			ap.mu.Lock()
			groups := ap.queue
			ap.queue = nil
			ap.syncing = len(groups)
			ap.mu.Unlock()
			if len(groups) == 0 {
				break
			}
			for i := len(groups) - 1; i >= 0; i-- {
				if groups[i].sync {
					err := p.env.syncTo(groups[i].end)
					if err != nil {
						err = p.env.fail(err)
						for _, g := range groups {
							if g.err == nil {
								g.err = err
							}
						}
					}
					break
				}
			}
			ap.mu.Lock()
			ap.synced = append(ap.synced, groups...)
			ap.syncing = 0
			early := p.acknowledge(groups)
			ap.mu.Unlock()
			notify(ap.ready)
			// The applier may apply and release them from here on: only
			// their requests, which it no longer touches, are ours.
			woken := 0
			for _, reqs := range early {
				for _, r := range reqs {
					r.wake <- struct{}{}
					woken++
				}
			}
			if woken > 1 {
				// The callers just woken wait in this goroutine's run
				// queue, and the next fdatasync would hold that queue, with
				// the processor, for the whole sync: on two cores they sat
				// runnable through it, missed it with their next appends,
				// and each fsync carried half the writers. Letting them run
				// first doubled the records per fsync (16 to 32 at 64
				// writers) and raised sync appends by about 10 %
				// (docs/PERFORMANCE.md).
				runtime.Gosched()
			}
		}
	}
}

// acknowledge marks the synced groups whose callers can be woken before
// the apply (visibility, below) and returns their requests. It runs under ap.mu,
// so the applier cannot apply and release a group while it is marked; the
// acknowledged id is published before any caller wakes, so a read that
// follows an append waits for it.
func (p *commitPipeline) acknowledge(groups []*group) [][]*request {
	if p.env.failed() != nil {
		// After a failed journal fsync the file may have lost pages below
		// these groups' blocks although their own fsync succeeded (Linux
		// drops the dirty pages of a failed fdatasync). Whatever failed,
		// the applier fails them and their callers hear it.
		return nil
	}
	var early [][]*request
	for _, g := range groups {
		if !p.ackEarly(g) {
			break // in journal order: nothing after a group left to the applier
		}
		early = append(early, g.reqs)
	}
	return early
}

// ackEarly marks g, written and (if durable) synced, as acknowledged before
// its apply, unless it must be completed by the applier: it failed, it
// carries settle marks, or the backlog is full. It runs under ap.mu.
func (p *commitPipeline) ackEarly(g *group) bool {
	ap := &p.applier
	if g.err != nil || len(g.marks) > 0 ||
		ap.earlyRecs+g.records > maxEarlyRecords || ap.earlyBytes+len(g.block) > maxEarlyBytes {
		return false
	}
	g.early = true
	ap.earlyRecs += g.records
	ap.earlyBytes += len(g.block)
	p.vis.acked.Store(g.id)
	return true
}

// runApplier is the applier goroutine.
func (p *commitPipeline) runApplier() {
	defer p.done.Done()
	ap := &p.applier
	for {
		select {
		case <-ap.ready:
		case <-p.stop:
			return
		}
		for {
			ap.mu.Lock()
			groups := ap.synced
			ap.synced = nil
			ap.mu.Unlock()
			if len(groups) == 0 {
				break
			}
			if p.env.beforeApply != nil {
				p.env.beforeApply()
			}
			p.env.apply(groups)
			var applied uint64
			for _, g := range groups {
				if g.err == nil {
					applied = g.id
				}
			}
			if applied > 0 {
				p.vis.advance(applied)
			}
			ap.mu.Lock()
			for _, g := range groups {
				if g.early {
					ap.earlyRecs -= g.records
					ap.earlyBytes -= len(g.block)
				}
			}
			ap.mu.Unlock()
			for _, g := range groups {
				p.complete(g, nil)
			}
			ap.mu.Lock()
			ap.inFlight -= len(groups)
			ap.mu.Unlock()
		}
	}
}

// Acknowledged before applied.
//
// A durable append is acknowledged once its journal block is fsynced: that
// is what makes it durable (SPEC §3), and recovery replays the journal into
// the segments and the index. Applying the group to the index and the
// segment buffers follows in the applier. Waiting for that apply before
// waking the caller put a Pebble commit on every append's critical path, so
// the syncer wakes a group's callers as soon as the fsync returns and the
// applier catches up behind it. A NoSync group is complete once its block is
// written, so its leader acknowledges it the same way (handOff).
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
