package outbox

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/anchordb/anchordb/internal/errs"
)

// checkMessage refuses a message over a limit or malformed (INPUT_001).
func (o *Outbox) checkMessage(m *Message) error {
	if err := ValidateID(m.ID); err != nil {
		return err
	}
	if len(m.Payload) > o.opts.MaxPayload {
		return errs.New(errs.CodeInvalidInput, "payload of entry %q is %d bytes, over the limit of %d", m.ID, len(m.Payload), o.opts.MaxPayload)
	}
	if len(m.Destination) > MaxDestinationBytes {
		return errs.New(errs.CodeInvalidInput, "destination of entry %q is %d bytes, over the limit of %d", m.ID, len(m.Destination), MaxDestinationBytes)
	}
	if !utf8.ValidString(m.Destination) {
		return errs.New(errs.CodeInvalidInput, "destination of entry %q is not valid UTF-8", m.ID)
	}
	if len(m.Headers) > MaxHeaders {
		return errs.New(errs.CodeInvalidInput, "entry %q has %d headers, over the limit of %d", m.ID, len(m.Headers), MaxHeaders)
	}
	for k, v := range m.Headers {
		if err := checkText("header name", k, MaxHeaderNameBytes); err != nil {
			return err
		}
		if len(v) > MaxHeaderValueBytes || !utf8.ValidString(v) {
			return errs.New(errs.CodeInvalidInput, "header %q of entry %q: a value is valid UTF-8 of at most %d bytes", k, m.ID, MaxHeaderValueBytes)
		}
	}
	if !m.NotBefore.IsZero() {
		if y := m.NotBefore.Year(); y < 1678 || y > 2261 {
			return errs.New(errs.CodeInvalidInput, "NotBefore of entry %q is out of range (years 1678..2261)", m.ID)
		}
	}
	return nil
}

// Enqueue adds the promise m, once: its id is the idempotency key
// (CONTRACT §12). For an id the outbox holds already, the entry is compared by
// fingerprint (payload and metadata) and nothing is written:
//
//	pending, inflight, same fingerprint  the entry as it is, Duplicate set
//	done, same fingerprint               the entry with its result, Duplicate set
//	dead, aborted, same fingerprint      STATE_002 naming the state: never retried by itself
//	any state, other fingerprint         STATE_002 with both fingerprints (8 bytes, hex)
//
// The lookup comes before the append, so a retry of a committed enqueue
// never meets the database's admission bounds or rate limit (no CAP_*).
// A new entry is one record; it is due at once, or at m.NotBefore.
// Errors: INPUT_001 for a message over a limit, STATE_002 (*StateError),
// and what the append returns.
func (o *Outbox) Enqueue(ctx context.Context, m Message) (Entry, error) {
	if err := o.checkMessage(&m); err != nil {
		return Entry{}, err
	}
	if err := o.enter(true); err != nil {
		return Entry{}, err
	}
	defer o.leave()
	fp := Fingerprint(m.Payload, m.Destination, m.Headers)
	o.locks.lock(m.ID)
	defer o.locks.unlock(m.ID)
	cur, found, err := o.lookup(ctx, m.ID)
	if err != nil {
		return Entry{}, err
	}
	if found {
		if cur.Fingerprint != fp {
			return Entry{}, fingerprintErr(cur, fp)
		}
		switch cur.State {
		case StatePending, StateInflight, StateDone:
			e := cur.clone()
			e.Duplicate = true
			return e, nil
		}
		return Entry{}, stateErr(cur, "it is never retried by itself (requeue it under a new id)")
	}
	now := o.now()
	next := now
	if m.NotBefore.After(now) {
		next = m.NotBefore
	}
	e := &Entry{Outbox: o.name, ID: m.ID, State: StatePending, Payload: append([]byte{}, m.Payload...),
		PayloadSize: len(m.Payload), Destination: m.Destination, Headers: copyHeaders(m.Headers),
		Fingerprint: fp, EnqueuedAt: now, NextAttemptAt: next}
	if err := o.commit(ctx, []write{{id: m.ID, e: e, t: transition{op: opEnqueue, at: now}}}); err != nil {
		return Entry{}, err
	}
	return e.clone(), nil
}

// MaxEnqueueBatch bounds the messages of one EnqueueBatch.
const MaxEnqueueBatch = 10000

// EnqueueBatch enqueues many messages in one atomic append: each as Enqueue
// would, with the new ones written together. A retry of a message the
// outbox holds comes back with Duplicate set, as from Enqueue; a message
// Enqueue would refuse (STATE_002) refuses the whole batch, and nothing is
// written. Two messages with one id, or more than MaxEnqueueBatch, are
// INPUT_001. Entries come back in the messages' order.
func (o *Outbox) EnqueueBatch(ctx context.Context, ms []Message) ([]Entry, error) {
	if len(ms) > MaxEnqueueBatch {
		return nil, errs.New(errs.CodeInvalidInput, "a batch of %d messages is over the limit of %d", len(ms), MaxEnqueueBatch)
	}
	seen := make(map[string]bool, len(ms))
	for i := range ms {
		if err := o.checkMessage(&ms[i]); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		if seen[ms[i].ID] {
			return nil, errs.New(errs.CodeInvalidInput, "message %d: id %q appears twice in the batch", i, ms[i].ID)
		}
		seen[ms[i].ID] = true
	}
	if err := o.enter(true); err != nil {
		return nil, err
	}
	defer o.leave()
	ids := make([]string, len(ms))
	for i := range ms {
		ids[i] = ms[i].ID
	}
	held := o.locks.lockAll(ids)
	defer o.locks.unlockAll(held)
	out := make([]Entry, len(ms))
	var ws []write
	var fresh []int
	now := o.now()
	for i := range ms {
		m := &ms[i]
		fp := Fingerprint(m.Payload, m.Destination, m.Headers)
		cur, found, err := o.lookup(ctx, m.ID)
		if err != nil {
			return nil, err
		}
		if found {
			if cur.Fingerprint != fp {
				return nil, fingerprintErr(cur, fp)
			}
			if cur.State == StateDead || cur.State == StateAborted {
				return nil, stateErr(cur, "it is never retried by itself (requeue it under a new id)")
			}
			out[i] = cur.clone()
			out[i].Duplicate = true
			continue
		}
		next := now
		if m.NotBefore.After(now) {
			next = m.NotBefore
		}
		e := &Entry{Outbox: o.name, ID: m.ID, State: StatePending, Payload: append([]byte{}, m.Payload...),
			PayloadSize: len(m.Payload), Destination: m.Destination, Headers: copyHeaders(m.Headers),
			Fingerprint: fp, EnqueuedAt: now, NextAttemptAt: next}
		ws = append(ws, write{id: m.ID, e: e, t: transition{op: opEnqueue, at: now}})
		fresh = append(fresh, i)
	}
	if len(ws) > 0 {
		if err := o.commit(ctx, ws); err != nil {
			return nil, err
		}
	}
	for j, i := range fresh {
		out[i] = ws[j].e.clone()
	}
	return out, nil
}

func copyHeaders(h map[string]string) map[string]string {
	if len(h) == 0 {
		return nil
	}
	c := make(map[string]string, len(h))
	for k, v := range h {
		c[k] = v
	}
	return c
}

// checkLease refuses a lease that names no valid id.
func checkLease(l Lease) error { return ValidateID(l.ID) }

// underLease looks the entry up under its lock and checks that l is its
// current lease: the entry is inflight and its lease has l's token (an
// expired lease that no claim has taken over is still current). Anything
// else is STATE_002 with the entry as it is; an unknown id is STATE_003.
func (o *Outbox) underLease(ctx context.Context, l Lease, what string) (*Entry, error) {
	cur, found, err := o.lookup(ctx, l.ID)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, notFound(o.name, l.ID)
	}
	if cur.State != StateInflight {
		return nil, stateErr(cur, "%s under lease %d refused: the entry holds no lease", what, l.Token)
	}
	if cur.Lease.Token != l.Token {
		return nil, stateErr(cur, "%s under lease %d refused: the entry's lease is %d (worker %q)", what, l.Token, cur.Lease.Token, cur.Lease.Worker)
	}
	return cur, nil
}

// Complete records that the entry of lease l was delivered, with an
// optional result (at most MaxPayload bytes), and returns it done. The
// done record leaves the payload out. A lease that is not the entry's
// current one is STATE_002 (*StateError, with the entry as it is) and
// nothing is written: completion is at most once.
func (o *Outbox) Complete(ctx context.Context, l Lease, result []byte) (Entry, error) {
	if err := checkLease(l); err != nil {
		return Entry{}, err
	}
	if len(result) > o.opts.MaxPayload {
		return Entry{}, errs.New(errs.CodeInvalidInput, "result of entry %q is %d bytes, over the limit of %d", l.ID, len(result), o.opts.MaxPayload)
	}
	if err := o.enter(true); err != nil {
		return Entry{}, err
	}
	defer o.leave()
	o.locks.lock(l.ID)
	defer o.locks.unlock(l.ID)
	cur, err := o.underLease(ctx, l, "complete")
	if err != nil {
		return Entry{}, err
	}
	w := completeWrite(cur, l, result, o.now())
	if err := o.commit(ctx, []write{w}); err != nil {
		return Entry{}, err
	}
	return w.e.clone(), nil
}

func completeWrite(cur *Entry, l Lease, result []byte, now time.Time) write {
	e := cur.clone()
	e.State, e.Lease, e.Payload, e.DoneAt, e.Duplicate = StateDone, nil, nil, now, false
	e.Result = append([]byte{}, result...)
	return write{id: l.ID, e: &e, prev: cur, t: transition{op: opComplete, at: now, by: cur.Lease.Worker, token: l.Token}}
}

// Fail records the failure of the attempt under lease l. A cause marked
// Permanent, or the failure of the policy's last attempt, makes the entry
// dead; otherwise it is pending again, due after the policy's delay. The
// failure record keeps cause's text (cut to MaxErrorBytes) and the
// policy_ref. A lease that is not the entry's current one is STATE_002,
// and nothing is written.
func (o *Outbox) Fail(ctx context.Context, l Lease, cause error) (Entry, error) {
	if err := checkLease(l); err != nil {
		return Entry{}, err
	}
	if err := o.enter(true); err != nil {
		return Entry{}, err
	}
	defer o.leave()
	o.locks.lock(l.ID)
	defer o.locks.unlock(l.ID)
	cur, err := o.underLease(ctx, l, "fail")
	if err != nil {
		return Entry{}, err
	}
	w := o.failWrite(cur, l, cause, o.now())
	if err := o.commit(ctx, []write{w}); err != nil {
		return Entry{}, err
	}
	return w.e.clone(), nil
}

func (o *Outbox) failWrite(cur *Entry, l Lease, cause error, now time.Time) write {
	e := cur.clone()
	e.Duplicate = false
	permanent := IsPermanent(cause)
	e.LastError = &Failure{Message: errorText(cause), Permanent: permanent, At: now, Attempt: cur.Attempts, PolicyRef: o.policyRef}
	e.Lease = nil
	if permanent || int64(cur.Attempts) >= o.policy.MaxAttempts {
		e.State, e.DeadAt = StateDead, now
	} else {
		e.State = StatePending
		e.NextAttemptAt = now.Add(o.policy.Delay(l.ID, cur.Attempts))
	}
	return write{id: l.ID, e: &e, prev: cur, t: transition{op: opFail, at: now, by: cur.Lease.Worker, token: l.Token}}
}

// errorText is the failure message recorded for err: its text, valid
// UTF-8, cut to MaxErrorBytes.
func errorText(err error) string {
	s := "failed"
	if err != nil {
		s = err.Error()
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > MaxErrorBytes {
		cut := MaxErrorBytes - len("…")
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// Extend renews lease l for ttl from now and returns it. An expired lease
// no claim has taken over may be extended. A lease that is not the entry's
// current one is STATE_002, and nothing is written.
func (o *Outbox) Extend(ctx context.Context, l Lease, ttl time.Duration) (Lease, error) {
	if err := checkLease(l); err != nil {
		return Lease{}, err
	}
	if err := checkTTL(ttl); err != nil {
		return Lease{}, err
	}
	if err := o.enter(true); err != nil {
		return Lease{}, err
	}
	defer o.leave()
	o.locks.lock(l.ID)
	defer o.locks.unlock(l.ID)
	cur, err := o.underLease(ctx, l, "extend")
	if err != nil {
		return Lease{}, err
	}
	w := extendWrite(cur, l, ttl, o.now())
	if err := o.commit(ctx, []write{w}); err != nil {
		return Lease{}, err
	}
	return *w.e.Lease, nil
}

func extendWrite(cur *Entry, l Lease, ttl time.Duration, now time.Time) write {
	e := cur.clone()
	e.Duplicate = false
	e.Lease.ExpiresAt = now.Add(ttl)
	return write{id: l.ID, e: &e, prev: cur, t: transition{op: opExtend, at: now, by: cur.Lease.Worker, token: l.Token}}
}

// outcome is the end of one attempt, for finishBatch: a completion with
// result when err is nil, else a failure.
type outcome struct {
	lease  Lease
	result []byte
	err    error
}

// finishBatch records many outcomes in one append, each as Complete or
// Fail would; errs[i] is outcome i's refusal (a lease not current:
// STATE_002), or the append's error for all of them.
func (o *Outbox) finishBatch(ctx context.Context, outs []outcome) (errs []error) {
	errs = make([]error, len(outs))
	ids := make([]string, len(outs))
	for i, oc := range outs {
		ids[i] = oc.lease.ID
	}
	if err := o.enter(true); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	defer o.leave()
	held := o.locks.lockAll(ids)
	defer o.locks.unlockAll(held)
	now := o.now()
	var ws []write
	var at []int
	seen := map[string]bool{}
	for i, oc := range outs {
		if seen[oc.lease.ID] {
			errs[i] = fmt.Errorf("outbox %q: entry %q twice in one batch", o.name, oc.lease.ID)
			continue
		}
		seen[oc.lease.ID] = true
		if oc.err == nil && len(oc.result) > o.opts.MaxPayload {
			// The delivery happened, but its result cannot be recorded: a
			// dead letter that says why, rather than a refusal of the batch.
			oc.err = Permanent(fmt.Errorf("the handler's result of %d bytes is over the limit of %d (Options.MaxPayload); it was not recorded", len(oc.result), o.opts.MaxPayload))
		}
		what := "complete"
		if oc.err != nil {
			what = "fail"
		}
		cur, err := o.underLease(ctx, oc.lease, what)
		if err != nil {
			errs[i] = err
			continue
		}
		if oc.err == nil {
			ws = append(ws, completeWrite(cur, oc.lease, oc.result, now))
		} else {
			ws = append(ws, o.failWrite(cur, oc.lease, oc.err, now))
		}
		at = append(at, i)
	}
	if len(ws) > 0 {
		if err := o.commit(ctx, ws); err != nil {
			for _, i := range at {
				errs[i] = err
			}
		}
	}
	return errs
}

// extendBatch renews many leases for ttl in one append, each as Extend
// would; errs[i] is lease i's refusal, or the append's error.
func (o *Outbox) extendBatch(ctx context.Context, ls []Lease, ttl time.Duration) (errs []error) {
	errs = make([]error, len(ls))
	ids := make([]string, len(ls))
	for i, l := range ls {
		ids[i] = l.ID
	}
	if err := o.enter(true); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	defer o.leave()
	held := o.locks.lockAll(ids)
	defer o.locks.unlockAll(held)
	now := o.now()
	var ws []write
	var at []int
	seen := map[string]bool{}
	for i, l := range ls {
		if seen[l.ID] {
			errs[i] = fmt.Errorf("outbox %q: entry %q twice in one batch", o.name, l.ID)
			continue
		}
		seen[l.ID] = true
		cur, err := o.underLease(ctx, l, "extend")
		if err != nil {
			errs[i] = err
			continue
		}
		ws = append(ws, extendWrite(cur, l, ttl, now))
		at = append(at, i)
	}
	if len(ws) > 0 {
		if err := o.commit(ctx, ws); err != nil {
			for _, i := range at {
				errs[i] = err
			}
		}
	}
	return errs
}

func checkTTL(ttl time.Duration) error {
	if ttl <= 0 || ttl > MaxLeaseTTL {
		return errs.New(errs.CodeInvalidInput, "lease time to live %v is out of range (0..%v]", ttl, MaxLeaseTTL)
	}
	return nil
}

// RequeueOption says how Requeue names and fills the successor.
type RequeueOption func(*requeueOpts)

type requeueOpts struct {
	newID   string
	auto    bool
	patch   []byte
	patched bool
	by      string
}

// NewID names the successor x, an id the outbox has never held.
func NewID(x string) RequeueOption { return func(r *requeueOpts) { r.newID = x } }

// AutoID names the successor after the entry: ID~1, then ID~2 and so on
// for a requeue of ID~1 (the first such id the outbox has never held).
var AutoID RequeueOption = func(r *requeueOpts) { r.auto = true }

// PatchPayload gives the successor payload p in place of the entry's.
func PatchPayload(p []byte) RequeueOption {
	return func(r *requeueOpts) { r.patch, r.patched = append([]byte{}, p...), true }
}

// By names who requeued (recorded as aborted_by), e.g. an operator.
func By(who string) RequeueOption { return func(r *requeueOpts) { r.by = who } }

// Requeue gives a dead or pending entry a successor, in one atomic append:
// the entry becomes aborted (kept, with who and when and superseded_by),
// and a new pending entry under a fresh id (NewID or AutoID, exactly one)
// takes its payload (or PatchPayload's) and metadata. The old id is never
// used again; Inspect shows the chain. Requeue of an inflight, done or
// aborted entry, or to an id already used, is STATE_002 and writes
// nothing; of an unknown id STATE_003. It returns the successor.
func (o *Outbox) Requeue(ctx context.Context, id string, opts ...RequeueOption) (Entry, error) {
	var ro requeueOpts
	for _, f := range opts {
		f(&ro)
	}
	if err := ValidateID(id); err != nil {
		return Entry{}, err
	}
	switch {
	case ro.auto == (ro.newID != ""):
		return Entry{}, errs.New(errs.CodeInvalidInput, "requeue of %q needs exactly one of NewID and AutoID", id)
	case ro.newID != "":
		if err := ValidateID(ro.newID); err != nil {
			return Entry{}, err
		}
		if ro.newID == id {
			return Entry{}, errs.New(errs.CodeInvalidInput, "requeue of %q: the new id must differ from the old", id)
		}
	}
	if len(ro.by) > MaxWorkerBytes || checkPrintable("requeued by", ro.by) != nil {
		return Entry{}, errs.New(errs.CodeInvalidInput, "requeued by %q: at most %d bytes of UTF-8 without control characters", ro.by, MaxWorkerBytes)
	}
	if ro.patched && len(ro.patch) > o.opts.MaxPayload {
		return Entry{}, errs.New(errs.CodeInvalidInput, "patched payload for %q is %d bytes, over the limit of %d", id, len(ro.patch), o.opts.MaxPayload)
	}
	if err := o.enter(true); err != nil {
		return Entry{}, err
	}
	defer o.leave()
	for try := 0; ; try++ {
		newID := ro.newID
		if ro.auto {
			var err error
			if newID, err = o.autoID(ctx, id, try); err != nil {
				return Entry{}, err
			}
		}
		e, retry, err := o.requeue(ctx, id, newID, &ro)
		if !retry || !ro.auto || try >= 100 {
			return e, err
		}
	}
}

// autoID proposes a successor id for id: the suffix ~N after the one id
// carries (or ~1), the first of them not held yet; try skips that many
// taken ones found under the locks by earlier tries.
func (o *Outbox) autoID(ctx context.Context, id string, try int) (string, error) {
	base, n := id, 0
	if i := strings.LastIndexByte(id, '~'); i > 0 {
		if k, err := strconv.Atoi(id[i+1:]); err == nil && k > 0 && strconv.Itoa(k) == id[i+1:] {
			base, n = id[:i], k
		}
	}
	for k := n + 1 + try; k < n+1+try+1000; k++ {
		cand := fmt.Sprintf("%s~%d", base, k)
		if len(cand) > MaxIDBytes {
			return "", errs.New(errs.CodeInvalidInput, "requeue of %q: the automatic id %q is over the limit of %d bytes (give NewID)", id, cand, MaxIDBytes)
		}
		_, found, err := o.lookupUnlocked(ctx, cand)
		if err != nil {
			return "", err
		}
		if !found {
			return cand, nil
		}
	}
	return "", errs.New(errs.CodeConflict, "requeue of %q: no free automatic id found (give NewID)", id)
}

// lookupUnlocked is lookup without the id's lock: a hint, checked again
// under the lock.
func (o *Outbox) lookupUnlocked(ctx context.Context, id string) (*Entry, bool, error) {
	return o.lookup(ctx, id)
}

// requeue does one try of Requeue: retry reports that newID was taken
// meanwhile.
func (o *Outbox) requeue(ctx context.Context, id, newID string, ro *requeueOpts) (Entry, bool, error) {
	held := o.locks.lockAll([]string{id, newID})
	defer o.locks.unlockAll(held)
	cur, found, err := o.lookup(ctx, id)
	if err != nil {
		return Entry{}, false, err
	}
	if !found {
		return Entry{}, false, notFound(o.name, id)
	}
	if cur.State != StateDead && cur.State != StatePending {
		return Entry{}, false, stateErr(cur, "only a dead or pending entry can be requeued")
	}
	taken, found, err := o.lookup(ctx, newID)
	if err != nil {
		return Entry{}, false, err
	}
	if found {
		return Entry{}, true, stateErr(taken, "requeue of %q: the id %q is already used (an id is never freed)", id, newID)
	}
	now := o.now()
	old := cur.clone()
	old.Duplicate = false
	old.State, old.Payload, old.AbortedAt, old.AbortedBy, old.SupersededBy = StateAborted, nil, now, ro.by, newID
	payload := cur.Payload
	if ro.patched {
		payload = ro.patch
	}
	succ := &Entry{Outbox: o.name, ID: newID, State: StatePending, Payload: append([]byte{}, payload...),
		PayloadSize: len(payload), Destination: cur.Destination, Headers: copyHeaders(cur.Headers),
		Fingerprint: Fingerprint(payload, cur.Destination, cur.Headers), EnqueuedAt: now, NextAttemptAt: now,
		Supersedes: id}
	ws := []write{
		{id: id, e: &old, prev: cur, t: transition{op: opRequeue, at: now, by: ro.by}},
		{id: newID, e: succ, t: transition{op: opRequeued, at: now, by: ro.by}},
	}
	if err := o.commit(ctx, ws); err != nil {
		return Entry{}, false, err
	}
	return succ.clone(), false, nil
}
