package outbox

import (
	"bytes"
	"context"
	"sort"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
)

// Get returns the entry id as it is; found is false when the outbox has
// never held it.
func (o *Outbox) Get(ctx context.Context, id string) (Entry, bool, error) {
	if err := ValidateID(id); err != nil {
		return Entry{}, false, err
	}
	if err := o.enter(false); err != nil {
		return Entry{}, false, err
	}
	defer o.leave()
	e, found, err := o.lookup(ctx, id)
	if err != nil || !found {
		return Entry{}, false, err
	}
	return e.clone(), true, nil
}

// ListOptions select what List returns.
type ListOptions struct {
	// State, if set, lists only entries in that state: pending ones by
	// (next_attempt_at, enqueue order), inflight ones by lease expiry, dead
	// ones by dead_at (from their index rows); done and aborted ones, and
	// all entries when State is 0, in id order (a scan of the entry rows).
	State State
	// Limit bounds the entries returned; 0 means no bound.
	Limit int
}

// List returns entries as ListOptions say.
func (o *Outbox) List(ctx context.Context, lo ListOptions) ([]Entry, error) {
	if lo.State != 0 && (lo.State < StatePending || lo.State > StateAborted) {
		return nil, errs.New(errs.CodeInvalidInput, "no state %d", uint8(lo.State))
	}
	if lo.Limit < 0 {
		return nil, errs.New(errs.CodeInvalidInput, "list limit %d is negative", lo.Limit)
	}
	if err := o.enter(false); err != nil {
		return nil, err
	}
	defer o.leave()
	if k := rowKind(lo.State); k != 0 {
		return o.listByRows(ctx, lo.State, lo.Limit)
	}
	var out []Entry
	for v, err := range o.db.ScanRange(ctx, o.k.kind(kindEntry), o.k.kindEnd(kindEntry)) {
		if err != nil {
			return nil, err
		}
		id, _ := o.k.parseEntryKey(v.Key)
		d, err := decodeTrusted(o.name, id, v.Value, v.Receipt)
		if err != nil {
			return nil, err
		}
		if lo.State != 0 && d.entry.State != lo.State {
			continue
		}
		out = append(out, d.entry)
		if lo.Limit > 0 && len(out) >= lo.Limit {
			break
		}
	}
	return out, nil
}

// Dead returns the dead entries — the dead letters — oldest first (by
// dead_at, then enqueue order); limit 0 means all.
func (o *Outbox) Dead(ctx context.Context, limit int) ([]Entry, error) {
	return o.List(ctx, ListOptions{State: StateDead, Limit: limit})
}

// listByRows lists the entries in a state that has index rows: the rows of
// entries the Outbox has not changed since they were written (each row
// holds its entry's record), merged with the ones it has, from memory.
// Flushes wait meanwhile, so that no entry leaves memory during the scan.
func (o *Outbox) listByRows(ctx context.Context, s State, limit int) ([]Entry, error) {
	o.flushMu.Lock()
	defer o.flushMu.Unlock()
	type keyed struct {
		at     int64
		enqSeq uint64
		e      Entry
	}
	kind := rowKind(s)
	var mem []keyed
	o.mu.Lock()
	lower := o.k.kind(kind)
	if kind != kindDead {
		if f := o.st.scanFrom(kind); f != nil {
			lower = f
		}
	}
	for _, h := range o.st.hot {
		if h.cur.State == s {
			mem = append(mem, keyed{h.cur.rowTime(), h.cur.EnqueueSeq, h.cur.clone()})
		}
	}
	o.mu.Unlock()
	less := func(a, b *keyed) bool {
		if a.at != b.at {
			return a.at < b.at
		}
		if a.enqSeq != b.enqSeq {
			return a.enqSeq < b.enqSeq
		}
		return a.e.ID < b.e.ID
	}
	sort.Slice(mem, func(i, j int) bool { return less(&mem[i], &mem[j]) })
	var out []Entry
	full := func() bool { return limit > 0 && len(out) >= limit }
	for v, err := range o.db.ScanRange(ctx, lower, o.k.kindEnd(kind)) {
		if err != nil {
			return nil, err
		}
		at, enq, id, ok := o.k.parseRow(kind, v.Key)
		if !ok || o.inMemory(id) {
			continue
		}
		for len(mem) > 0 && !full() && less(&mem[0], &keyed{at, enq, Entry{ID: id}}) {
			out = append(out, mem[0].e)
			mem = mem[1:]
		}
		if full() {
			break
		}
		e, err := o.decodeRow(kind, v.Key, v.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, *e)
	}
	for len(mem) > 0 && !full() {
		out = append(out, mem[0].e)
		mem = mem[1:]
	}
	return out, nil
}

// inMemory reports whether the Outbox holds entry id in memory, where its
// state is newer than (or the same as) its row's.
func (o *Outbox) inMemory(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.st.hot[id] != nil
}

// Transition is one record of an entry's history: the op that made it
// (enqueue, requeued, claim, extend, complete, fail, expire, requeue), when
// (the outbox's clock) and by whom (a worker, an operator), the lease
// token it was accepted under, the state it left (0 for a new entry), and
// the entry after it, whose Receipt is the record's.
type Transition struct {
	Op    string
	At    time.Time
	By    string
	Token uint64
	From  State
	Entry Entry
}

// Inspection is an entry with its whole history.
type Inspection struct {
	Entry       Entry
	Transitions []Transition
	// Chain lists the ids of the requeue chain through the entry, oldest
	// first (just the entry's id when it was never requeued nor is a
	// successor).
	Chain []string
}

// maxChain bounds the requeue chain Inspect follows.
const maxChain = 10000

// Inspect returns the entry id with every transition the index holds of it
// (a compaction may have dropped older ones; a rebuild from a snapshot
// keeps only the last) and its requeue chain. An unknown id is STATE_003.
func (o *Outbox) Inspect(ctx context.Context, id string) (Inspection, error) {
	if err := ValidateID(id); err != nil {
		return Inspection{}, err
	}
	if err := o.enter(false); err != nil {
		return Inspection{}, err
	}
	defer o.leave()
	var in Inspection
	cur, found, err := o.lookup(ctx, id)
	if err != nil {
		return in, err
	}
	if !found {
		return in, notFound(o.name, id)
	}
	in.Entry = cur.clone()
	for v, err := range o.db.Versions(ctx, o.k.entry(id)) {
		if err != nil {
			return in, err
		}
		if v.Deleted {
			continue
		}
		d, err := decodeRecord(o.name, id, v.Value, v.Receipt)
		if err != nil {
			return in, err
		}
		in.Transitions = append(in.Transitions, Transition{Op: d.op, At: d.at, By: d.by, Token: d.token, From: d.prev.state, Entry: d.entry})
	}
	chain := []string{id}
	for back, n := cur.Supersedes, 0; back != "" && n < maxChain; n++ {
		chain = append([]string{back}, chain...)
		e, found, err := o.lookup(ctx, back)
		if err != nil {
			return in, err
		}
		if !found {
			break
		}
		back = e.Supersedes
	}
	for fwd, n := cur.SupersededBy, 0; fwd != "" && n < maxChain; n++ {
		chain = append(chain, fwd)
		e, found, err := o.lookup(ctx, fwd)
		if err != nil {
			return in, err
		}
		if !found {
			break
		}
		fwd = e.SupersededBy
	}
	in.Chain = chain
	return in, nil
}

// Stats is an outbox's health.
type Stats struct {
	Outbox string
	// Entries by state.
	Pending, Inflight, Done, Dead, Aborted int64
	// OldestPendingAge is how long the most overdue pending entry has been
	// due (now − its next_attempt_at; 0 when none is due yet): the backlog
	// no worker has taken. OldestDeadAge is the age of the oldest dead
	// letter (0 when there is none).
	OldestPendingAge time.Duration
	OldestDeadAge    time.Duration
	// InflightLeases counts the leases held (the inflight entries);
	// ExpiredLeases those past their expiry that no claim has taken over
	// yet — a worker that died, or one that is late.
	InflightLeases int64
	ExpiredLeases  int64
	// Durable: the outbox's appends are fsynced before they return.
	Durable bool
	// Watermark is the seq the index rows stand at (the last flush's);
	// Unflushed counts the entries changed since.
	Watermark uint64
	Unflushed int
}

// Stats returns the counts by state (kept in memory: O(1)), the oldest
// pending and dead ages (the first index row, O(log n)) and the expired
// leases (the lease rows due by now: O(expired)). Flushes wait meanwhile.
func (o *Outbox) Stats(ctx context.Context) (Stats, error) {
	if err := o.enter(false); err != nil {
		return Stats{}, err
	}
	defer o.leave()
	o.flushMu.Lock()
	defer o.flushMu.Unlock()
	now := o.now()
	nowNs := now.UnixNano()
	s := Stats{Outbox: o.name, Durable: o.durable}

	// From memory: the counts, and the entries changed lately.
	hotPending, hotDead := int64(-1), int64(-1)
	o.mu.Lock()
	c := o.st.counts
	s.Watermark, s.Unflushed = o.st.mark.w, len(o.st.dirty)
	rFrom, lFrom := o.st.scanFrom(kindReady), o.st.scanFrom(kindLease)
	if it := o.st.topValid(&o.st.ready, StatePending); it != nil {
		hotPending = it.at
	}
	if it := o.st.topValid(&o.st.dead, StateDead); it != nil {
		hotDead = it.at
	}
	for i := range o.st.leases {
		if it := &o.st.leases[i]; it.at <= nowNs && o.st.validItem(it, StateInflight) {
			s.ExpiredLeases++
		}
	}
	o.mu.Unlock()
	s.Pending, s.Inflight, s.Done, s.Dead, s.Aborted = c[0], c[1], c[2], c[3], c[4]
	s.InflightLeases = s.Inflight

	// From the rows of the entries not in memory.
	first := func(kind byte, from []byte) (int64, bool, error) {
		if from == nil {
			from = o.k.kind(kind)
		}
		for v, err := range o.db.ScanRange(ctx, from, o.k.kindEnd(kind)) {
			if err != nil {
				return 0, false, err
			}
			if at, _, id, ok := o.k.parseRow(kind, v.Key); ok && !o.inMemory(id) {
				return at, true, nil
			}
		}
		return 0, false, nil
	}
	oldest := func(rowAt int64, rowOK bool, hot int64) int64 {
		switch {
		case rowOK && (hot < 0 || rowAt < hot):
			return rowAt
		case hot >= 0:
			return hot
		}
		return nowNs
	}
	at, ok, err := first(kindReady, rFrom)
	if err != nil {
		return s, err
	}
	s.OldestPendingAge = max(0, time.Duration(nowNs-oldest(at, ok, hotPending)))
	at, ok, err = first(kindDead, nil)
	if err != nil {
		return s, err
	}
	s.OldestDeadAge = max(0, time.Duration(nowNs-oldest(at, ok, hotDead)))
	if lFrom == nil {
		lFrom = o.k.kind(kindLease)
	}
	upper := o.k.rowsUpTo(kindLease, nowNs)
	if bytes.Compare(lFrom, upper) >= 0 {
		return s, nil
	}
	for v, err := range o.db.ScanRange(ctx, lFrom, upper) {
		if err != nil {
			return s, err
		}
		if _, _, id, ok := o.k.parseRow(kindLease, v.Key); ok && !o.inMemory(id) {
			s.ExpiredLeases++
		}
	}
	return s, nil
}
