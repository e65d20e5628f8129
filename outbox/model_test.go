package outbox

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
	"pgregory.net/rapid"
)

// The state-machine test: random operations against the outbox and a model
// of its states, with the clock, flushes, crashes (a clone of the crashable
// MemFS keeping only what was synced, then a reopen) and index rebuilds
// among them. After every step each entry must be what the model says, the
// counts too, and the pending and dead listings in the model's order; now
// and then Verify must pass. Along the way: no entry is lost (every id the
// model holds is found), none is completed twice (the model accepts one
// completion), no transition leaves the state machine, attempts never go
// down, an id is never freed, and what a reopen rebuilds from the log is
// what was live.

// The model's retry policies: one with backoff and jitter, and one that
// retries at once, so that an entry comes back to the very row it left.
var modelPolicies = []Policy{
	{Version: "v1", MaxAttempts: 3, Backoff: Backoff{BaseMS: 1000, Multiplier: 2, CapMS: 4000}, Jitter: 0.5},
	{Version: "v1", MaxAttempts: 3, Backoff: Backoff{BaseMS: 0, Multiplier: 1, CapMS: 0}},
}

type mEntry struct {
	state      State
	payload    string
	fp         segment.Hash
	attempts   int
	enqSeq     uint64
	next       time.Time
	token      uint64
	expires    time.Time
	result     string
	superBy    string
	supersedes string
}

type outboxMachine struct {
	policy Policy
	ctx    context.Context
	mem    *vfs.MemFS
	fs     *syncCrashFS
	db     *engine.DB
	ob     *Outbox
	clk    *clock
	m      map[string]*mEntry
	leases []Lease // every lease ever handed out, current or not
	maxAtt map[string]int
	steps  []string
}

func (mm *outboxMachine) logf(format string, args ...any) {
	mm.steps = append(mm.steps, fmt.Sprintf(format, args...))
}

func (mm *outboxMachine) fail(t *rapid.T, format string, args ...any) {
	t.Helper()
	tail := mm.steps
	if len(tail) > 40 {
		tail = tail[len(tail)-40:]
	}
	t.Fatalf("%s\nlast steps:\n  %s", fmt.Sprintf(format, args...), strings.Join(tail, "\n  "))
}

func (mm *outboxMachine) open(t *rapid.T) {
	mm.openDB(t)
	mm.openOutbox(t)
}

func (mm *outboxMachine) openDB(t *rapid.T) {
	if mm.fs == nil || mm.fs.mem != mm.mem {
		mm.fs = newSyncCrashFS(mm.mem)
	}
	db, err := engine.Open("db", engine.Options{FS: mm.fs, SegmentSize: 4096, SettleBytes: 8 << 10})
	if err != nil {
		mm.fail(t, "open db: %v", err)
	}
	mm.db = db
}

func (mm *outboxMachine) openOutbox(t *rapid.T) {
	ob, err := Open(mm.ctx, mm.db, "billing", Options{Clock: mm.clk.Now, Policy: mm.policy, FlushInterval: -1, FlushEntries: 1 << 30})
	if err != nil {
		mm.fail(t, "open outbox: %v", err)
	}
	mm.ob = ob
}

func (mm *outboxMachine) close() {
	_ = mm.ob.Close()
	_ = mm.db.Close()
}

func (mm *outboxMachine) id(t *rapid.T) string {
	ids := []string{"a", "b", "c", "d", "e"}
	for id := range mm.m {
		if len(id) > 1 {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return rapid.SampledFrom(ids).Draw(t, "id")
}

func (mm *outboxMachine) Enqueue(t *rapid.T) {
	id := mm.id(t)
	payload := rapid.SampledFrom([]string{"p0", "p1"}).Draw(t, "payload")
	got, err := mm.ob.Enqueue(mm.ctx, Message{ID: id, Payload: []byte(payload)})
	mm.logf("enqueue %s %s: %v %v", id, payload, got.State, err)
	me := mm.m[id]
	fp := Fingerprint([]byte(payload), "", nil)
	switch {
	case me == nil:
		if err != nil || got.State != StatePending || got.Duplicate {
			mm.fail(t, "enqueue of new %s: %+v %v", id, got, err)
		}
		mm.m[id] = &mEntry{state: StatePending, payload: payload, fp: fp, enqSeq: got.EnqueueSeq, next: mm.clk.Now()}
	case me.fp != fp:
		mm.wantState(t, err, me.state, "enqueue with another fingerprint")
		var se *StateError
		if errors.As(err, &se) && (se.Existing == "" || se.Requested == "") {
			mm.fail(t, "fingerprint refusal without both fingerprints: %v", err)
		}
	case me.state == StateDead || me.state == StateAborted:
		mm.wantState(t, err, me.state, "enqueue of a "+me.state.String()+" entry")
	default:
		if err != nil || !got.Duplicate || got.State != me.state || (me.state == StateDone && string(got.Result) != me.result) {
			mm.fail(t, "retry of %s (%s): %+v %v", id, me.state, got, err)
		}
	}
}

// wantState checks err is the outbox's STATE_002 carrying state s.
func (mm *outboxMachine) wantState(t *rapid.T, err error, s State, what string) {
	var se *StateError
	if !errors.As(err, &se) || engine.CodeOf(err) != "STATE_002" || se.State() != s {
		mm.fail(t, "%s: %v, want STATE_002 naming %s", what, err, s)
	}
}

// due lists the model's claimable entries in claim order.
func (mm *outboxMachine) due() []string {
	now := mm.clk.Now()
	type c struct {
		at  time.Time
		enq uint64
		id  string
	}
	var cs []c
	for id, me := range mm.m {
		switch {
		case me.state == StatePending && !me.next.After(now):
			cs = append(cs, c{me.next, me.enqSeq, id})
		case me.state == StateInflight && !me.expires.After(now):
			cs = append(cs, c{me.expires, me.enqSeq, id})
		}
	}
	sort.Slice(cs, func(i, j int) bool {
		if !cs[i].at.Equal(cs[j].at) {
			return cs[i].at.Before(cs[j].at)
		}
		return cs[i].enq < cs[j].enq
	})
	ids := make([]string, len(cs))
	for i := range cs {
		ids[i] = cs[i].id
	}
	return ids
}

func (mm *outboxMachine) Claim(t *rapid.T) {
	n := rapid.IntRange(1, 3).Draw(t, "n")
	ttl := time.Duration(rapid.IntRange(1, 5).Draw(t, "ttl")) * time.Second
	due := mm.due()
	got, err := mm.ob.Claim(mm.ctx, "w", n, ttl)
	mm.logf("claim %d ttl %v (due %v): %d %v", n, ttl, due, len(got), err)
	if err != nil {
		mm.fail(t, "claim: %v", err)
	}
	now := mm.clk.Now()
	var want []string
	for _, id := range due[:min(n, len(due))] {
		me := mm.m[id]
		if me.state == StateInflight && me.attempts >= int(mm.policy.MaxAttempts) {
			me.state = StateDead
			continue
		}
		want = append(want, id)
	}
	if len(got) != len(want) {
		mm.fail(t, "claim of %d: got %d entries, want %v", n, len(got), want)
	}
	var last uint64
	for i, e := range got {
		me := mm.m[e.ID]
		if e.ID != want[i] || e.State != StateInflight || e.Attempts != me.attempts+1 || e.Lease == nil || e.Lease.Token <= last {
			mm.fail(t, "claim %d: %+v, want %s with attempts %d", i, e, want[i], me.attempts+1)
		}
		if e.Lease.Token <= me.token {
			mm.fail(t, "fencing token %d does not grow (was %d)", e.Lease.Token, me.token)
		}
		last = e.Lease.Token
		me.state, me.attempts, me.token, me.expires = StateInflight, e.Attempts, e.Lease.Token, now.Add(ttl)
		mm.leases = append(mm.leases, *e.Lease)
	}
}

func (mm *outboxMachine) lease(t *rapid.T) (Lease, bool) {
	if len(mm.leases) == 0 {
		return Lease{}, false
	}
	return rapid.SampledFrom(mm.leases).Draw(t, "lease"), true
}

// current reports whether l is the current lease of its entry in the model.
func (mm *outboxMachine) current(l Lease) (*mEntry, bool) {
	me := mm.m[l.ID]
	return me, me != nil && me.state == StateInflight && me.token == l.Token
}

func (mm *outboxMachine) Complete(t *rapid.T) {
	l, ok := mm.lease(t)
	if !ok {
		t.Skip("no lease")
	}
	res := rapid.SampledFrom([]string{"", "r1"}).Draw(t, "result")
	got, err := mm.ob.Complete(mm.ctx, l, []byte(res))
	mm.logf("complete %s/%d: %v %v", l.ID, l.Token, got.State, err)
	me, cur := mm.current(l)
	if !cur {
		mm.wantState(t, err, me.state, "complete under a lease not current")
		return
	}
	if err != nil || got.State != StateDone || string(got.Result) != res {
		mm.fail(t, "complete: %+v %v", got, err)
	}
	me.state, me.result = StateDone, res
}

func (mm *outboxMachine) Fail(t *rapid.T) {
	l, ok := mm.lease(t)
	if !ok {
		t.Skip("no lease")
	}
	permanent := rapid.Bool().Draw(t, "permanent")
	cause := errors.New("it broke")
	if permanent {
		cause = Permanent(cause)
	}
	got, err := mm.ob.Fail(mm.ctx, l, cause)
	mm.logf("fail %s/%d permanent=%v: %v %v", l.ID, l.Token, permanent, got.State, err)
	me, cur := mm.current(l)
	if !cur {
		mm.wantState(t, err, me.state, "fail under a lease not current")
		return
	}
	if err != nil {
		mm.fail(t, "fail: %v", err)
	}
	now := mm.clk.Now()
	if permanent || me.attempts >= int(mm.policy.MaxAttempts) {
		me.state = StateDead
	} else {
		me.state, me.next = StatePending, now.Add(mm.policy.Delay(l.ID, me.attempts))
	}
	if got.State != me.state || (me.state == StatePending && !got.NextAttemptAt.Equal(me.next)) || got.LastError == nil || got.LastError.Permanent != permanent {
		mm.fail(t, "fail: %+v, want %s at %v", got, me.state, me.next)
	}
}

func (mm *outboxMachine) Extend(t *rapid.T) {
	l, ok := mm.lease(t)
	if !ok {
		t.Skip("no lease")
	}
	ttl := time.Duration(rapid.IntRange(1, 5).Draw(t, "ttl")) * time.Second
	got, err := mm.ob.Extend(mm.ctx, l, ttl)
	mm.logf("extend %s/%d %v: %v", l.ID, l.Token, ttl, err)
	me, cur := mm.current(l)
	if !cur {
		mm.wantState(t, err, me.state, "extend under a lease not current")
		return
	}
	if err != nil || got.Token != l.Token || !got.ExpiresAt.Equal(mm.clk.Now().Add(ttl)) {
		mm.fail(t, "extend: %+v %v", got, err)
	}
	me.expires = got.ExpiresAt
}

func (mm *outboxMachine) Requeue(t *rapid.T) {
	id := mm.id(t)
	auto := rapid.Bool().Draw(t, "auto")
	newID := ""
	opts := []RequeueOption{AutoID}
	if !auto {
		newID = rapid.SampledFrom([]string{"n1", "n2", "a"}).Draw(t, "new")
		opts = []RequeueOption{NewID(newID)}
	}
	patch := rapid.SampledFrom([]string{"", "p2"}).Draw(t, "patch")
	if patch != "" {
		opts = append(opts, PatchPayload([]byte(patch)))
	}
	got, err := mm.ob.Requeue(mm.ctx, id, opts...)
	mm.logf("requeue %s auto=%v new=%q patch=%q: %s %v", id, auto, newID, patch, got.ID, err)
	me := mm.m[id]
	switch {
	case newID == id:
		if engine.CodeOf(err) != "INPUT_001" {
			mm.fail(t, "requeue of %s to itself: %v, want INPUT_001", id, err)
		}
		return
	case me == nil:
		if engine.CodeOf(err) != "STATE_003" {
			mm.fail(t, "requeue of unknown %s: %v", id, err)
		}
		return
	case me.state != StatePending && me.state != StateDead:
		mm.wantState(t, err, me.state, "requeue of a "+me.state.String()+" entry")
		return
	case newID != "" && mm.m[newID] != nil:
		mm.wantState(t, err, mm.m[newID].state, "requeue to an id already used")
		return
	}
	if err != nil || got.State != StatePending || got.Supersedes != id || mm.m[got.ID] != nil || (!auto && got.ID != newID) {
		mm.fail(t, "requeue of %s: %+v %v", id, got, err)
	}
	payload := me.payload
	if patch != "" {
		payload = patch
	}
	me.state, me.superBy = StateAborted, got.ID
	mm.m[got.ID] = &mEntry{state: StatePending, payload: payload, fp: Fingerprint([]byte(payload), "", nil),
		enqSeq: got.EnqueueSeq, next: mm.clk.Now(), supersedes: id}
}

func (mm *outboxMachine) Tick(t *rapid.T) {
	d := time.Duration(rapid.IntRange(1, 4000).Draw(t, "ms")) * time.Millisecond
	mm.clk.Add(d)
	mm.logf("tick %v", d)
}

func (mm *outboxMachine) Flush(t *rapid.T) {
	if err := mm.ob.Flush(mm.ctx); err != nil {
		mm.fail(t, "flush: %v", err)
	}
	mm.logf("flush")
}

func (mm *outboxMachine) CrashReopen(t *rapid.T) {
	clone := mm.mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	mm.close() // the old process is gone: it writes to the old MemFS only
	mm.mem = clone
	mm.open(t)
	mm.logf("crash and reopen")
}

// CrashDuring runs one operation and crashes at a random sync while it
// runs (of the journal, a settle, the index): the reopened database has
// the operation whole or not at all, and the outbox is what the model
// says, with the operation or without it.
func (mm *outboxMachine) CrashDuring(t *rapid.T) {
	ops := []struct {
		name string
		run  func(*rapid.T)
	}{{"enqueue", mm.Enqueue}, {"claim", mm.Claim}, {"complete", mm.Complete}, {"fail", mm.Fail},
		{"extend", mm.Extend}, {"requeue", mm.Requeue}, {"flush", mm.Flush}}
	op := rapid.IntRange(0, len(ops)-1).Draw(t, "op")
	k := rapid.IntRange(1, 6).Draw(t, "sync")
	early := rapid.Bool().Draw(t, "before")
	before := mm.saveModel()
	h0 := mm.head(t)
	mm.fs.arm(k, early)
	ops[op].run(t)
	h1 := mm.head(t)
	clone := mm.fs.take()
	mm.close()
	mm.mem = clone
	mm.openDB(t)
	h2 := mm.head(t) // before the outbox opens: it may write (a rebuild of its rows)
	mm.openOutbox(t)
	mm.logf("crash at sync %d (before it: %v) during %s: head %d → %d, after the crash %d", k, early, ops[op].name, h0, h1, h2)
	switch h2 {
	case h1:
	case h0:
		mm.restoreModel(before) // it never happened
	default:
		mm.fail(t, "%s appended records %d..%d; after a crash the log ends at %d, inside them", ops[op].name, h0+1, h1, h2)
	}
}

type savedModel struct {
	m      map[string]mEntry
	leases int
	maxAtt map[string]int
}

func (mm *outboxMachine) saveModel() savedModel {
	s := savedModel{m: map[string]mEntry{}, leases: len(mm.leases), maxAtt: map[string]int{}}
	for id, me := range mm.m {
		s.m[id] = *me
	}
	for id, a := range mm.maxAtt {
		s.maxAtt[id] = a
	}
	return s
}

func (mm *outboxMachine) restoreModel(s savedModel) {
	mm.m = map[string]*mEntry{}
	for id, me := range s.m {
		c := me
		mm.m[id] = &c
	}
	mm.leases, mm.maxAtt = mm.leases[:s.leases], s.maxAtt
}

// head is the number of records on the outbox's anchor.
func (mm *outboxMachine) head(t *rapid.T) uint64 {
	info, _, err := mm.db.AnchorInfo(mm.ctx, AnchorPrefix+"billing")
	if err != nil && engine.CodeOf(err) != "STATE_003" {
		mm.fail(t, "anchor info: %v", err)
	}
	return info.Records
}

// Compact takes a checkpoint and a snapshot and truncates the log below
// it, twice (the first run takes the snapshot, the second cuts below it),
// with the outbox open: its memory does not depend on the records cut,
// and a later open that finds records past its mark gone rebuilds its
// rows from the entry rows.
func (mm *outboxMachine) Compact(t *rapid.T) {
	pol := snapshot.DefaultPolicy()
	pol.RawLog, pol.KeepSnapshots, pol.Snapshot.EveryRecords = snapshot.RawLogTruncate, 1, 1
	for range 2 {
		if _, _, err := mm.db.CreateCheckpoint(mm.ctx, modelSigner); err != nil {
			mm.fail(t, "checkpoint: %v", err)
		}
		if _, err := mm.db.Compact(mm.ctx, pol, engine.CompactOptions{Apply: true}); err != nil {
			mm.fail(t, "compact: %v", err)
		}
	}
	mm.logf("compact")
}

// CrashDuringReopen crashes at a random sync while the outbox closes (its
// last flush) and opens again (a rebuild of its rows, when records past
// its mark were cut): the outbox that opens after is the model's.
func (mm *outboxMachine) CrashDuringReopen(t *rapid.T) {
	k := rapid.IntRange(1, 12).Draw(t, "sync")
	early := rapid.Bool().Draw(t, "before")
	mm.fs.arm(k, early)
	mm.close()
	mm.open(t)
	clone := mm.fs.take()
	mm.close()
	mm.mem = clone
	mm.open(t)
	mm.logf("crash at sync %d (before it: %v) of a close and an open", k, early)
}

func (mm *outboxMachine) Reopen(t *rapid.T) {
	mm.close()
	mm.open(t)
	mm.logf("reopen")
}

func (mm *outboxMachine) RebuildIndex(t *rapid.T) {
	mm.close()
	if _, err := engine.RebuildIndex(mm.ctx, "db", engine.Options{FS: mm.mem, SegmentSize: 4096, SettleBytes: 8 << 10}, true); err != nil {
		mm.fail(t, "rebuild index: %v", err)
	}
	mm.open(t)
	mm.logf("rebuild index")
}

func (mm *outboxMachine) Verify(t *rapid.T) {
	rep, err := mm.ob.Verify(mm.ctx)
	if err != nil || !rep.OK {
		mm.fail(t, "verify: %v %+v", err, rep.Failures)
	}
	mm.logf("verify")
}

func (mm *outboxMachine) Check(t *rapid.T) {
	var c counts
	for id, me := range mm.m {
		c[me.state-1]++
		e, found, err := mm.ob.Get(mm.ctx, id)
		if err != nil || !found {
			mm.fail(t, "entry %s lost: %v", id, err)
		}
		if e.State != me.state || e.Attempts != me.attempts || e.Fingerprint != me.fp || e.EnqueueSeq != me.enqSeq ||
			e.SupersededBy != me.superBy || e.Supersedes != me.supersedes {
			mm.fail(t, "entry %s: %+v\nmodel %+v", id, e, me)
		}
		if e.Attempts < mm.maxAtt[id] {
			mm.fail(t, "entry %s: attempts went down from %d to %d", id, mm.maxAtt[id], e.Attempts)
		}
		mm.maxAtt[id] = e.Attempts
		switch me.state {
		case StatePending:
			if !e.NextAttemptAt.Equal(me.next) || e.Lease != nil {
				mm.fail(t, "pending %s: next %v, model %v; lease %v", id, e.NextAttemptAt, me.next, e.Lease)
			}
		case StateInflight:
			if e.Lease == nil || e.Lease.Token != me.token || !e.Lease.ExpiresAt.Equal(me.expires) {
				mm.fail(t, "inflight %s: lease %+v, model token %d expires %v", id, e.Lease, me.token, me.expires)
			}
		case StateDone:
			if string(e.Result) != me.result || e.Payload != nil {
				mm.fail(t, "done %s: %+v", id, e)
			}
		case StateDead, StatePending + 100:
			if string(e.Payload) != me.payload {
				mm.fail(t, "dead %s lost its payload: %+v", id, e)
			}
		}
	}
	// The state a fresh process would rebuild from the log is the live
	// state, and the log never completed an entry twice, never lowered its
	// attempts, never left the state machine.
	rl, err := replayLog(mm.ctx, mm.db, "billing")
	if err != nil {
		mm.fail(t, "replay the log: %v", err)
	}
	if len(rl.problems) > 0 {
		mm.fail(t, "the log: %v", rl.problems)
	}
	if len(rl.last) != len(mm.m) {
		mm.fail(t, "the log holds %d entries, the model %d", len(rl.last), len(mm.m))
	}
	for id, d := range rl.last {
		e, _, err := mm.ob.Get(mm.ctx, id)
		if err != nil {
			mm.fail(t, "get %s: %v", id, err)
		}
		l := &d.entry
		if e.Receipt.Seq != l.Receipt.Seq || e.State != l.State || e.Attempts != l.Attempts ||
			!e.NextAttemptAt.Equal(l.NextAttemptAt) || (e.Lease == nil) != (l.Lease == nil) ||
			e.Lease != nil && (e.Lease.Token != l.Lease.Token || !e.Lease.ExpiresAt.Equal(l.Lease.ExpiresAt)) {
			mm.fail(t, "entry %s live %+v\nfrom the log %+v", id, e, *l)
		}
	}
	st, err := mm.ob.Stats(mm.ctx)
	if err != nil {
		mm.fail(t, "stats: %v", err)
	}
	if got := (counts{st.Pending, st.Inflight, st.Done, st.Dead, st.Aborted}); got != c {
		mm.fail(t, "stats counts %v, model %v", got, c)
	}
	for _, s := range []State{StatePending, StateDead, StateInflight} {
		l, err := mm.ob.List(mm.ctx, ListOptions{State: s})
		if err != nil {
			mm.fail(t, "list %s: %v", s, err)
		}
		if len(l) != int(c[s-1]) {
			mm.fail(t, "list %s: %d entries, model %d", s, len(l), c[s-1])
		}
		for i := 1; i < len(l); i++ {
			a, b := &l[i-1], &l[i]
			if a.rowTime() > b.rowTime() || a.rowTime() == b.rowTime() && a.EnqueueSeq > b.EnqueueSeq {
				mm.fail(t, "list %s out of order: %s before %s", s, a.ID, b.ID)
			}
		}
	}
}

// modelSigner signs the model's checkpoints (a truncation needs one).
var modelSigner = func() string {
	k, _, err := proof.GenerateKeys("test.example/outbox-model")
	if err != nil {
		panic(err)
	}
	return k
}()

func TestStateMachine(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mm := &outboxMachine{policy: rapid.SampledFrom(modelPolicies).Draw(t, "policy"),
			ctx: context.Background(), mem: vfs.NewCrashableMem(), clk: newClock(),
			m: map[string]*mEntry{}, maxAtt: map[string]int{}}
		mm.open(t)
		defer mm.close()
		t.Repeat(rapid.StateMachineActions(mm))
	})
}
