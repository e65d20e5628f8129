package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/anchordb/anchordb/internal/journal"
)

// testCommitEnv runs the commit pipeline without a database: build makes a
// group of the requests (one record each unless records says otherwise),
// syncTo and apply record what they were given and call their hooks, which
// tests use to hold them on a channel.
type testCommitEnv struct {
	records func(id uint64) int // records of group id; nil: one per request
	onBuild func(id uint64)
	onSync  func(call int, end journal.Pos) error
	onApply func(groups []*group)

	mu      sync.Mutex
	syncs   []journal.Pos
	applied []uint64

	failure atomic.Pointer[error]
	fails   atomic.Int32 // calls of fail that stopped writes
}

func (e *testCommitEnv) env() commitEnv {
	return commitEnv{
		build: func(id uint64, reqs []*request) *group {
			g := &group{id: id, reqs: reqs, end: journal.Pos{Gen: 1, Off: int64(id)}, block: make([]byte, 100)}
			g.records = len(reqs)
			if e.records != nil {
				g.records = e.records(id)
			}
			for _, r := range reqs {
				g.sync = g.sync || r.sync
				if r.settle != nil {
					g.marks = append(g.marks, r.settle)
				}
			}
			if f := e.failed(); f != nil {
				g.err = f // as the database's build: nothing is written after a failure
			}
			if e.onBuild != nil {
				e.onBuild(id)
			}
			return g
		},
		syncTo: func(end journal.Pos) error {
			e.mu.Lock()
			e.syncs = append(e.syncs, end)
			call := len(e.syncs)
			e.mu.Unlock()
			if e.onSync != nil {
				return e.onSync(call, end)
			}
			return nil
		},
		apply: func(groups []*group) {
			if e.onApply != nil {
				e.onApply(groups)
			}
			e.mu.Lock()
			for _, g := range groups {
				e.applied = append(e.applied, g.id)
			}
			e.mu.Unlock()
		},
		release: func(*group) {},
		failed:  e.failed,
		fail: func(err error) error {
			stopped := fmt.Errorf("stopped: %w", err)
			if e.failure.CompareAndSwap(nil, &stopped) {
				e.fails.Add(1)
			}
			return *e.failure.Load()
		},
	}
}

func (e *testCommitEnv) failed() error {
	if f := e.failure.Load(); f != nil {
		return *f
	}
	return nil
}

func (e *testCommitEnv) appliedIDs() []uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]uint64(nil), e.applied...)
}

func testRequest(sync bool) *request {
	return &request{sync: sync, wake: make(chan struct{}, 1)}
}

// startPipeline runs a pipeline over e and closes it when the test ends.
func startPipeline(t testing.TB, e *testCommitEnv) *commitPipeline {
	p := newCommitPipeline(e.env())
	p.start()
	t.Cleanup(p.close)
	return p
}

// TestCommitPipelineAppliesInJournalOrder: concurrent sync and NoSync
// commits are each completed once, and every group is applied once, in the
// order it was built.
func TestCommitPipelineAppliesInJournalOrder(t *testing.T) {
	const writers, each = 64, 200
	e := &testCommitEnv{}
	p := startPipeline(t, e)
	reqs := make([][]*request, writers)
	var wg sync.WaitGroup
	for w := range writers {
		rnd := rand.New(rand.NewSource(int64(w)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				r := testRequest(rnd.Intn(2) == 0)
				p.commit(r)
				reqs[w] = append(reqs[w], r)
			}
		}()
	}
	wg.Wait()
	if err := p.awaitVisible(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, rs := range reqs {
		for _, r := range rs {
			if r.err != nil {
				t.Fatalf("a commit failed: %v", r.err)
			}
			if len(r.wake) != 0 {
				t.Fatal("a caller was woken twice")
			}
		}
	}
	ids := e.appliedIDs()
	for i, id := range ids {
		if id != uint64(i+1) {
			t.Fatalf("applied group %d in place %d: want groups 1.. in order", id, i+1)
		}
	}
	if built := p.leader.built; uint64(len(ids)) != built || p.vis.applied.Load() != built {
		t.Fatalf("built %d groups, applied %d, visible through %d", built, len(ids), p.vis.applied.Load())
	}
}

// TestCommitPipelineOneSyncCoversWaitingGroups: the groups written while a
// journal sync runs share the next one, which reaches the last durable
// group among them.
func TestCommitPipelineOneSyncCoversWaitingGroups(t *testing.T) {
	built := make(chan uint64, 16)
	inSync, release := make(chan struct{}), make(chan struct{})
	e := &testCommitEnv{
		onBuild: func(id uint64) { built <- id },
		onSync: func(call int, _ journal.Pos) error {
			if call == 1 {
				close(inSync)
				<-release
			}
			return nil
		},
	}
	p := startPipeline(t, e)
	var wg sync.WaitGroup
	commit := func(sync bool) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.commit(testRequest(sync))
		}()
		<-built // one group per commit: the next starts after this one is built
	}
	commit(true)
	<-inSync
	for range 5 {
		commit(true)
	}
	// A NoSync group behind them: once it is built, the five are queued
	// for the syncer (each leader hands off before it passes leadership on).
	commit(false)
	close(release)
	wg.Wait()
	e.mu.Lock()
	defer e.mu.Unlock()
	want := []journal.Pos{{Gen: 1, Off: 1}, {Gen: 1, Off: 6}}
	if fmt.Sprint(e.syncs) != fmt.Sprint(want) {
		t.Fatalf("journal synced to %v, want %v", e.syncs, want)
	}
}

// TestCommitPipelineNoSyncIsAcknowledgedBeforeApply: a NoSync commit with
// nothing durable ahead returns before its apply, and a reader waits for
// that apply.
func TestCommitPipelineNoSyncIsAcknowledgedBeforeApply(t *testing.T) {
	release := make(chan struct{})
	e := &testCommitEnv{onApply: func([]*group) { <-release }}
	p := startPipeline(t, e)
	r := testRequest(false)
	p.commit(r)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if acked, applied := p.vis.acked.Load(), p.vis.applied.Load(); acked != 1 || applied != 0 {
		t.Fatalf("acknowledged %d, applied %d; want 1 and 0 while the apply is held", acked, applied)
	}
	visible := make(chan error, 1)
	go func() { visible <- p.awaitVisible(context.Background()) }()
	select {
	case err := <-visible:
		t.Fatalf("awaitVisible returned (%v) while the apply was held", err)
	default:
	}
	close(release)
	if err := <-visible; err != nil {
		t.Fatal(err)
	}
	if got := p.vis.applied.Load(); got != 1 {
		t.Fatalf("visible through %d after awaitVisible, want 1", got)
	}
}

// TestCommitPipelineBacklogBound: past the bound on records acknowledged
// and not applied, a NoSync commit returns only after its apply.
func TestCommitPipelineBacklogBound(t *testing.T) {
	release := make(chan struct{})
	e := &testCommitEnv{
		records: func(id uint64) int {
			if id == 1 {
				return maxEarlyRecords // fills the backlog
			}
			return 1
		},
		onApply: func(groups []*group) {
			if groups[0].id == 1 {
				<-release
			}
		},
	}
	p := startPipeline(t, e)
	p.commit(testRequest(false)) // acknowledged early: its apply is held
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.commit(testRequest(false))
	}()
	// Release the first apply only once the second group is handed off
	// (in flight beside the first), while the backlog is still full.
	for {
		p.applier.mu.Lock()
		n := p.applier.inFlight
		p.applier.mu.Unlock()
		if n == 2 {
			break
		}
		runtime.Gosched()
	}
	close(release)
	<-done
	ids := e.appliedIDs()
	if len(ids) != 2 || ids[1] != 2 {
		t.Fatalf("the commit past the backlog bound returned with groups %v applied", ids)
	}
	if acked := p.vis.acked.Load(); acked != 1 {
		t.Fatalf("acknowledged early through %d, want 1", acked)
	}
}

// TestCommitPipelineSettleMarkWaitsForApply: a group carrying a settle mark
// is never acknowledged before its apply, durable or not.
func TestCommitPipelineSettleMarkWaitsForApply(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%v", durable), func(t *testing.T) {
			applying, release := make(chan struct{}), make(chan struct{})
			e := &testCommitEnv{onApply: func([]*group) {
				close(applying)
				<-release
			}}
			p := startPipeline(t, e)
			r := testRequest(durable)
			r.settle = &settleMark{}
			done := make(chan struct{})
			go func() {
				defer close(done)
				p.commit(r)
			}()
			<-applying
			select {
			case <-done:
				t.Fatal("a settle mark returned before its apply finished")
			default:
			}
			if acked := p.vis.acked.Load(); acked != 0 {
				t.Fatalf("a settle mark was acknowledged early (acked %d)", acked)
			}
			close(release)
			<-done
		})
	}
}

// TestCommitPipelineSyncFailureFailsEveryLaterGroup: a failed journal sync
// fails its group and stops writes once; later groups carry the failure and
// none is acknowledged early.
func TestCommitPipelineSyncFailureFailsEveryLaterGroup(t *testing.T) {
	boom := errors.New("fdatasync: input/output error")
	e := &testCommitEnv{onSync: func(call int, _ journal.Pos) error {
		if call == 3 {
			return boom
		}
		return nil
	}}
	p := startPipeline(t, e)
	var reqs []*request
	for i := range 6 {
		r := testRequest(i%2 == 0 || i < 3) // groups 1-3 durable, then mixed
		p.commit(r)
		reqs = append(reqs, r)
	}
	for i, r := range reqs {
		switch {
		case i < 2 && r.err != nil:
			t.Fatalf("group %d before the failed sync failed: %v", i+1, r.err)
		case i >= 2 && !errors.Is(r.err, boom):
			t.Fatalf("group %d at or after the failed sync: err %v, want the sync's failure", i+1, r.err)
		}
	}
	if n := e.fails.Load(); n != 1 {
		t.Fatalf("writes stopped %d times, want once", n)
	}
	if acked := p.vis.acked.Load(); acked > 2 {
		t.Fatalf("acknowledged early through group %d after the failure at group 3", acked)
	}
}

// TestCommitPipelineCloseReleasesWaiters: a reader waiting for groups the
// closed pipeline never applied, and one that comes after, hear errClosed.
func TestCommitPipelineCloseReleasesWaiters(t *testing.T) {
	e := &testCommitEnv{}
	p := newCommitPipeline(e.env()) // not started: nothing is applied
	p.commit(testRequest(false))    // acknowledged early
	waiting := make(chan error, 1)
	go func() { waiting <- p.awaitVisible(context.Background()) }()
	p.close()
	if err := <-waiting; !errors.Is(err, errClosed) {
		t.Fatalf("a reader waiting at close: %v, want errClosed", err)
	}
	if err := p.awaitVisible(context.Background()); !errors.Is(err, errClosed) {
		t.Fatalf("a reader after close: %v, want errClosed", err)
	}
}

// BenchmarkCommitPipeline measures the pipeline alone (queue, leadership,
// syncer, applier) over an env that does no work: ns per commit.
func BenchmarkCommitPipeline(b *testing.B) {
	for _, durable := range []bool{true, false} {
		for _, writers := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("sync=%v/writers=%d", durable, writers), func(b *testing.B) {
				e := &testCommitEnv{}
				env := e.env()
				env.syncTo = func(journal.Pos) error { return nil } // keep no lists
				env.apply = func([]*group) {}
				p := newCommitPipeline(env)
				p.start()
				defer p.close()
				b.ResetTimer()
				var wg sync.WaitGroup
				for w := range writers {
					n := b.N / writers
					if w < b.N%writers {
						n++
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range n {
							r := newRequest()
							r.sync = durable
							p.commit(r)
							freeRequest(r)
						}
					}()
				}
				wg.Wait()
			})
		}
	}
}
