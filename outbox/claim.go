package outbox

import (
	"bytes"
	"context"
	"sort"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
)

// cand is an entry a claim may take: from an r or l row (key set) or from
// a heap of the entries changed since the last flush.
type cand struct {
	at     int64
	enqSeq uint64
	id     string
	key    []byte // the row, for a candidate found in the rows
	val    []byte // and its value: the entry's record
	kind   byte   // kindReady or kindLease
	heap   bool
	valid  bool // a row candidate still names a claimable entry
	it     item
}

func candLess(a, b *cand) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.enqSeq != b.enqSeq {
		return a.enqSeq < b.enqSeq
	}
	return a.id < b.id
}

// Claim takes up to n (1..MaxClaim) claimable entries for worker under
// leases of ttl: pending entries due by now (next_attempt_at <= now) and
// inflight ones whose lease has expired, in (time, enqueue order) — the
// time of a pending entry is its next_attempt_at, of an expired lease its
// expiry. Each claimed entry's attempts go up by one and it gets a fencing
// token, the seq of its claim record (so tokens only grow). An expired
// lease on the policy's last attempt makes its entry dead instead (op
// "expire"); that entry is not returned. All of it is one atomic append.
//
// The candidates come from the index rows, read from where the last claim
// stopped, merged with the entries changed since the last flush, kept in
// memory in time order: O(log n + k), never a scan of the outbox. An empty
// slice means nothing is claimable now.
func (o *Outbox) Claim(ctx context.Context, worker string, n int, ttl time.Duration) ([]Entry, error) {
	if len(worker) > MaxWorkerBytes || checkPrintable("worker", worker) != nil {
		return nil, errs.New(errs.CodeInvalidInput, "worker %q: at most %d bytes of UTF-8 without control characters", worker, MaxWorkerBytes)
	}
	if n < 1 || n > MaxClaim {
		return nil, errs.New(errs.CodeInvalidInput, "claim of %d entries (must be 1..%d)", n, MaxClaim)
	}
	if err := checkTTL(ttl); err != nil {
		return nil, err
	}
	if err := o.enter(true); err != nil {
		return nil, err
	}
	defer o.leave()
	now := o.now()
	ids, rows, err := o.selectCands(ctx, n, now.UnixNano())
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	held := o.locks.lockAll(ids)
	out, err := o.claimHeld(ctx, held, rows, worker, now, ttl)
	o.locks.unlockAll(held)
	o.mu.Lock()
	for _, id := range held {
		if err != nil {
			// Not claimed: the candidates are where they were.
			if r, ok := o.st.reservedRows[id]; ok {
				o.st.rewind(r.kind, r.key)
			}
			if h := o.st.hot[id]; h != nil {
				o.st.pushItem(id, h)
			}
		}
		delete(o.st.reserved, id)
		delete(o.st.reservedRows, id)
	}
	o.mu.Unlock()
	return out, err
}

// claimHeld claims the entries ids, whose locks the caller holds, that are
// still claimable at now. An entry selected by its row and not in memory
// is the row's: reserved, it would be in memory had anything changed it.
func (o *Outbox) claimHeld(ctx context.Context, ids []string, rows map[string]*cand, worker string, now time.Time, ttl time.Duration) ([]Entry, error) {
	var ws []write
	for _, id := range ids {
		var cur *Entry
		found := true
		var err error
		o.mu.Lock()
		h := o.st.hot[id]
		o.mu.Unlock()
		switch c := rows[id]; {
		case h != nil:
			cur = h.cur
		case c != nil:
			cur, err = o.decodeRow(c.kind, c.key, c.val)
		default:
			cur, found, err = o.lookup(ctx, id)
		}
		if err != nil {
			return nil, err
		}
		if !found {
			continue
		}
		switch {
		case cur.State == StatePending && !cur.NextAttemptAt.After(now):
			e := cur.clone()
			e.State, e.Attempts = StateInflight, cur.Attempts+1
			e.Lease = &Lease{ID: id, Worker: worker, ClaimedAt: now, ExpiresAt: now.Add(ttl)}
			ws = append(ws, write{id: id, e: &e, prev: cur, t: transition{op: opClaim, at: now, by: worker}})
		case cur.State == StateInflight && !cur.Lease.ExpiresAt.After(now):
			e := cur.clone()
			if int64(cur.Attempts) >= o.policy.MaxAttempts {
				e.State, e.Lease, e.DeadAt = StateDead, nil, now
				e.LastError = &Failure{Message: "the lease of the last attempt expired (worker " + cur.Lease.Worker + ")",
					At: now, Attempt: cur.Attempts, PolicyRef: o.policyRef}
				ws = append(ws, write{id: id, e: &e, prev: cur, t: transition{op: opExpire, at: now, by: worker}})
				continue
			}
			e.Attempts = cur.Attempts + 1
			e.Lease = &Lease{ID: id, Worker: worker, ClaimedAt: now, ExpiresAt: now.Add(ttl)}
			ws = append(ws, write{id: id, e: &e, prev: cur, t: transition{op: opClaim, at: now, by: worker}})
		}
	}
	if len(ws) == 0 {
		return nil, nil
	}
	// Claims in (time, enqueue order), as they were selected.
	sort.SliceStable(ws, func(i, j int) bool {
		a, b := ws[i].prev, ws[j].prev
		ta, tb := a.rowTime(), b.rowTime()
		if ta != tb {
			return ta < tb
		}
		return a.EnqueueSeq < b.EnqueueSeq
	})
	if err := o.commit(ctx, ws); err != nil {
		return nil, err
	}
	var out []Entry
	for _, w := range ws {
		if w.e.State == StateInflight {
			out = append(out, w.e.clone())
		}
	}
	return out, nil
}

// selectCands picks up to n candidates due at now and reserves them, so
// that concurrent claims pick others. rows holds those taken from rows.
//
// It holds flushMu: a row read here says an entry not in memory is in the
// row's state only while no flush forgets entries. A flush that wrote the
// entry's new rows and then forgot it between this scan (an iterator on
// the index before that flush) and the check would make a stale row look
// current, and claim an entry that is done.
func (o *Outbox) selectCands(ctx context.Context, n int, now int64) (ids []string, rows map[string]*cand, err error) {
	o.claimMu.Lock()
	defer o.claimMu.Unlock()
	o.flushMu.Lock()
	defer o.flushMu.Unlock()
	o.mu.Lock()
	rCur, lCur, epoch := o.st.from[0], o.st.from[1], o.st.cursorEpoch
	o.mu.Unlock()
	rRows, err := o.scanRows(ctx, kindReady, rCur, now, n)
	if err != nil {
		return nil, nil, err
	}
	lRows, err := o.scanRows(ctx, kindLease, lCur, now, n)
	if err != nil {
		return nil, nil, err
	}

	o.mu.Lock()
	defer o.mu.Unlock()
	var all []*cand
	for _, rows := range [][]*cand{rRows, lRows} {
		for _, c := range rows {
			if c.valid = o.validRow(c); c.valid {
				all = append(all, c)
			}
		}
	}
	all = append(all, o.popDue(&o.st.ready, StatePending, now, n)...)
	all = append(all, o.popDue(&o.st.leases, StateInflight, now, n)...)
	sort.Slice(all, func(i, j int) bool { return candLess(all[i], all[j]) })
	taken := map[string]bool{}
	rows = map[string]*cand{}
	for _, c := range all {
		if len(ids) < n && !taken[c.id] {
			taken[c.id] = true
			ids = append(ids, c.id)
			o.st.reserved[c.id] = true
			if !c.heap {
				o.st.reservedRows[c.id] = rowKey{kind: c.kind, key: c.key}
				rows[c.id] = c
			}
			continue
		}
		if c.heap && !taken[c.id] {
			o.pushBack(c.it, c.kind)
		}
	}
	if o.st.cursorEpoch == epoch {
		o.st.from[0] = advanceFrom(rRows, taken, rCur)
		o.st.from[1] = advanceFrom(lRows, taken, lCur)
	}
	return ids, rows, nil
}

// scanRows reads the rows of kind due at now from key from on (nil: the
// first), until n valid ones (validRow) are found or none is left. The
// caller checks validity again under o.mu.
func (o *Outbox) scanRows(ctx context.Context, kind byte, from []byte, now int64, n int) ([]*cand, error) {
	lower := o.k.kind(kind)
	if from != nil {
		lower = from
	}
	upper := o.k.rowsUpTo(kind, now)
	if bytes.Compare(lower, upper) >= 0 {
		return nil, nil
	}
	var out []*cand
	valid := 0
	for v, err := range o.db.ScanRange(ctx, lower, upper) {
		if err != nil {
			return nil, err
		}
		at, enq, id, ok := o.k.parseRow(kind, v.Key)
		if !ok {
			continue
		}
		c := &cand{at: at, enqSeq: enq, id: id, key: append([]byte(nil), v.Key...), val: append([]byte(nil), v.Value...), kind: kind}
		out = append(out, c)
		o.mu.Lock()
		if o.validRow(c) {
			valid++
		}
		o.mu.Unlock()
		if valid >= n {
			break
		}
	}
	return out, nil
}

// validRow reports whether a row candidate names a claimable entry not
// reserved by another claim: one the Outbox has not changed since the rows
// were written (so the row is its state), or whose state in memory is the
// row's. o.mu is held.
func (o *Outbox) validRow(c *cand) bool {
	if o.st.reserved[c.id] {
		return false
	}
	h := o.st.hot[c.id]
	if h == nil {
		return true
	}
	e := h.cur
	switch c.kind {
	case kindReady:
		return e.State == StatePending && e.NextAttemptAt.UnixNano() == c.at && e.EnqueueSeq == c.enqSeq
	default:
		return e.State == StateInflight && e.Lease.ExpiresAt.UnixNano() == c.at && e.EnqueueSeq == c.enqSeq
	}
}

// popDue pops up to n valid items due at now from a heap; stale items are
// dropped. o.mu is held.
func (o *Outbox) popDue(h *itemHeap, want State, now int64, n int) []*cand {
	kind := byte(kindReady)
	if want == StateInflight {
		kind = kindLease
	}
	var out []*cand
	for len(*h) > 0 && len(out) < n && h.top().at <= now {
		it := h.pop()
		if !o.st.validItem(&it, want) || o.st.reserved[it.id] {
			continue
		}
		out = append(out, &cand{at: it.at, enqSeq: it.enqSeq, id: it.id, kind: kind, heap: true, it: it})
	}
	return out
}

func (o *Outbox) pushBack(it item, kind byte) {
	if kind == kindReady {
		o.st.ready.push(it)
	} else {
		o.st.leases.push(it)
	}
}

// advanceFrom moves a scan's start to the first row read that is a valid
// candidate not taken, or past the last row read: the rows before it were
// taken now, or are of entries changed since (in memory) or reserved.
func advanceFrom(rows []*cand, taken map[string]bool, from []byte) []byte {
	for _, c := range rows {
		if c.valid && !taken[c.id] {
			return c.key
		}
	}
	if len(rows) > 0 {
		return append(append([]byte(nil), rows[len(rows)-1].key...), 0)
	}
	return from
}
