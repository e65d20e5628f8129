package engine

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/anchordb/anchordb/engine/internal/admission"
	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
)

// Entry is one record to append. The engine assigns seq, time (unless set),
// prev_hash and hash, and the counter unless one is supplied.
type Entry struct {
	Anchor string
	// Type is "put", "delete", or any other name (1–64 bytes) for an event.
	Type  string
	Key   []byte // required for put and delete; optional for events
	Value []byte // the value of a put, the payload of an event
	// IdempotencyKey, if set (1–256 bytes), makes a retry of the same request
	// return the original receipt instead of appending again (SPEC §7).
	IdempotencyKey []byte
	// Counter, if nonzero, is used as the merge counter; it must be greater
	// than the anchor's last counter (else STATE_002) and at most
	// MaxCallerCounter (else INPUT_001). Zero: the Lamport clock assigns one.
	Counter uint64
	// Time, if nonzero, is recorded as the record time; zero: now. A
	// record time is int64 Unix nanoseconds: a time outside the years
	// 1678..2262 is INPUT_001 (CheckRecordTime).
	Time time.Time
}

// Receipt acknowledges an append: where the record is and what it hashes to.
type Receipt struct {
	Anchor    string       `json:"anchor"`
	Seq       uint64       `json:"seq"`
	Counter   uint64       `json:"counter"`
	Hash      segment.Hash `json:"hash"`
	Duplicate bool         `json:"duplicate"`
}

// MaxBatchBytes bounds one Append or AppendBatch call (keys, values and
// per-record overhead): a commit group must fit one journal block.
const MaxBatchBytes = 256 << 20

// RecordOverhead is what each record counts toward MaxBatchBytes (and the
// admission byte bound) besides its key, value and idempotency key.
const RecordOverhead = 128

// MaxCounter is the largest counter a record may carry, so counters always
// fit a signed 64-bit integer (and JSON consumers that parse them as such).
const MaxCounter = math.MaxInt64

// MaxCallerCounter is the largest counter a caller may supply (Entry.Counter,
// `--counter`, an imported line's counter): half of MaxCounter. The Lamport
// clock follows the highest counter the database has seen, so a caller
// counter near MaxCounter would leave the clock nowhere to go, and every
// later default-counter append on every anchor would be refused. Above this
// one, 2^62 default counters are still left. Records that arrive verbatim
// (ingest) keep their counters, up to MaxIngestCounter.
const MaxCallerCounter = MaxCounter / 2

// MaxIngestCounter is the largest counter Ingest accepts in an arriving
// log. An honest log's counters are callers' (at most MaxCallerCounter) or
// its clock's, one above the highest it had seen, so they exceed
// MaxCallerCounter by at most the number of appends made since: 2^48 is
// more than any deployment makes. A source that claims more would move our
// clock to the end of the format and refuse every later default-counter
// append; past this bound, about 2^62 are still left.
const MaxIngestCounter = MaxCallerCounter + 1<<48

// Put appends a put of key=value to the anchor's log: Append of an Entry of
// type "put", with the same contract.
func (db *DB) Put(ctx context.Context, anchor string, key, value []byte, opts ...WriteOption) (Receipt, error) {
	return db.Append(ctx, Entry{Anchor: anchor, Type: segment.TypePut, Key: key, Value: value}, opts...)
}

// Delete appends a delete of key to the anchor's log: Append of an Entry of
// type "delete" (no value), with the same contract. Deleting a key that has
// no live value still appends a record.
func (db *DB) Delete(ctx context.Context, anchor string, key []byte, opts ...WriteOption) (Receipt, error) {
	return db.Append(ctx, Entry{Anchor: anchor, Type: segment.TypeDelete, Key: key}, opts...)
}

// Append appends one record and returns its receipt once it is durable (or,
// with NoSync, once it has reached the OS); a read started after it returns
// sees it. The engine assigns seq, prev_hash and hash, the time unless
// e.Time is set, and the counter unless e.Counter is set.
//
// Refusals append nothing: INPUT_001 for an entry over a limit or
// malformed, STATE_002 for a counter not above the anchor's last or an
// idempotency key used for another request (a *ConflictError), STATE_001
// while an ingest holds the anchor, CAP_* (a *RefusalError) from admission,
// and INT_* when the anchor is damaged and read-only. An IO_001 means the
// engine failed between journaling and acknowledging: the append may or may
// not be there after a reopen, so retry it with an idempotency key. A retry
// of a committed idempotency key with the same request returns the original
// receipt with Duplicate set, without consulting admission.
func (db *DB) Append(ctx context.Context, e Entry, opts ...WriteOption) (Receipt, error) {
	rs, err := db.appendEntries(ctx, []Entry{e}, opts)
	if err != nil {
		return Receipt{}, err
	}
	return rs[0], nil
}

// AppendBatch appends many records, possibly to many anchors, atomically: all
// are appended or none is. Receipts come back in entry order; an entry that
// repeats an idempotency key already used gets the original receipt with
// Duplicate set and appends nothing.
func (db *DB) AppendBatch(ctx context.Context, entries []Entry, opts ...WriteOption) ([]Receipt, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	return db.appendEntries(ctx, entries, opts)
}

func (db *DB) appendEntries(ctx context.Context, entries []Entry, opts []WriteOption) ([]Receipt, error) {
	if err := db.writable(); err != nil {
		return nil, err
	}
	var wo writeOptions
	for _, o := range opts {
		o(&wo)
	}
	sync := !db.opts.NoSync
	if wo.setNoSync {
		sync = !wo.noSync
	}
	var bytes int64
	for i := range entries {
		e := &entries[i]
		err := segment.ValidateContent(e.Anchor, e.Type, e.Key, e.Value, e.IdempotencyKey, db.opts.Limits)
		if err == nil {
			err = CheckCallerCounter(e.Counter, len(e.IdempotencyKey) > 0)
		}
		if err == nil {
			err = CheckRecordTime(e.Time)
		}
		if err != nil {
			if len(entries) > 1 {
				return nil, fmt.Errorf("entry %d: %w", i, err)
			}
			return nil, err
		}
		bytes += int64(len(e.Key) + len(e.Value) + len(e.IdempotencyKey) + RecordOverhead)
	}
	if bytes > MaxBatchBytes {
		return nil, errs.New(errs.CodeInvalidInput, "batch of %d bytes is above the %d-byte limit of one append", bytes, MaxBatchBytes)
	}
	// The duplicate fast path (SPEC §7, §8): a retry of a committed append
	// is answered before any bound or rate limit is consulted, and entries
	// whose keys are committed or in flight cost nothing.
	c, done, rs, err := db.admissionCost(entries, bytes, sync)
	if err != nil || done {
		return rs, err
	}
	if c.Records > 0 {
		// A segment write waiting for a file descriptor: refused now,
		// retryable, rather than queued behind it (fdbudget.go).
		if err := db.fdRefusal(); err != nil {
			return nil, err
		}
	}
	if err := db.adm.Acquire(ctx, &c, db.opts.RefuseWhenFull); err != nil {
		return nil, err
	}
	defer db.adm.Release(&c)
	// A caller that gave up (Ctrl-C in the CLI) must not have its append
	// made anyway because admission had room and did not wait. (When it
	// had to wait, acquire itself refuses with CAP_001 or CAP_002.)
	if err := ctx.Err(); err != nil {
		db.adm.ReturnTokens(c.Anchors)
		return nil, err
	}

	req := newRequest()
	req.entries, req.sync = entries, sync
	db.commit.commit(req)
	rs, err = req.receipts, req.err
	freeRequest(req)
	if err != nil {
		db.adm.ReturnTokens(c.Anchors)
		return nil, err
	}
	db.refundDuplicates(entries, rs, &c)
	return rs, nil
}

// admissionCost looks up the idempotency keys of entries. When every entry
// is a committed duplicate it returns their receipts (done); a single entry
// whose key is committed with another fingerprint is STATE_002 at once.
// Otherwise it returns the cost of the entries that may append.
//
// A durable request is answered here only when every journal block written
// so far is durable: its duplicates may be of a NoSync append whose block is
// not, and a durable receipt must name a durable record (SPEC §3). Else the
// duplicates, which cost nothing, go through a commit group, whose fsync
// covers the original's block.
func (db *DB) admissionCost(entries []Entry, bytes int64, sync bool) (c admission.Cost, done bool, rs []Receipt, err error) {
	if db.adm.Disabled() {
		return admission.Cost{Records: len(entries), Bytes: bytes}, false, nil, nil
	}
	c = admission.Cost{Records: len(entries), Bytes: bytes, Anchors: make(map[string]int, 1)}
	dups := 0
	for i := range entries {
		e := &entries[i]
		if len(e.IdempotencyKey) > 0 {
			prior, found, pending, err := db.knownIdem(e.Anchor, e.IdempotencyKey)
			if err != nil {
				return c, false, nil, err
			}
			if found {
				fp := segment.Fingerprint(e.Type, e.Key, e.Value)
				rc := duplicateOf(prior, e.Anchor)
				if prior.Fingerprint != fp && !pending && len(entries) == 1 {
					return c, false, nil, newConflict(rc, prior.Fingerprint, fp, e.IdempotencyKey)
				}
				// In a batch an earlier entry may be refused first: the
				// leader, validating in entry order, decides which refusal
				// the batch reports.
				if prior.Fingerprint == fp {
					if !pending {
						rs = append(rs, rc)
					}
					if c.Free == nil {
						c.Free = make([]bool, len(entries))
					}
					c.Free[i] = true
					dups++
					c.Records--
					c.Bytes -= int64(len(e.Key) + len(e.Value) + len(e.IdempotencyKey) + RecordOverhead)
					continue
				}
			}
		}
		c.Anchors[e.Anchor]++
	}
	if dups == len(entries) && len(rs) == len(entries) && (!sync || db.journal.WrittenSynced()) {
		db.metrics.duplicates.Add(uint64(dups))
		return c, true, rs, nil
	}
	return c, false, nil, nil
}

// duplicateOf is the receipt a retry carrying an idempotency key gets in
// anchor, e being the key's 'i' row: the original append's, marked a
// duplicate (SPEC §7).
func duplicateOf(e schema.Idem, anchor string) Receipt {
	return Receipt{Anchor: anchor, Seq: e.Seq, Counter: e.Counter, Hash: e.Hash, Duplicate: true}
}

// knownIdem finds an idempotency key committed (in the index, or in a group
// acknowledged but not yet applied) or in flight (in a group not yet
// acknowledged).
func (db *DB) knownIdem(anchor string, key []byte) (e schema.Idem, found, pending bool, err error) {
	db.idemMu.Lock()
	pi, found := db.pendingIdem[anchor+"\x00"+string(key)]
	db.idemMu.Unlock()
	if found {
		// Acknowledged but not yet applied is committed, not in flight.
		return pi.Idem, true, pi.group > db.commit.vis.acked.Load(), nil
	}
	// A read of the index, which Close waits for before it closes it: the
	// append is not admitted yet, so admission's gate does not hold Close.
	if !db.reads.Enter() {
		return e, false, false, errClosed
	}
	defer db.reads.Leave()
	e, found, err = db.lookupIdem(anchor, key)
	return e, found, false, err
}

// IdempotencyReceipt returns the receipt of the append that used the
// idempotency key in the anchor, and whether one did (SPEC §7): what a
// retry carrying the key gets back, as a duplicate when its request is the
// same. An append acknowledged but not yet applied counts.
func (db *DB) IdempotencyReceipt(ctx context.Context, anchor string, key []byte) (Receipt, bool, error) {
	if err := ctx.Err(); err != nil {
		return Receipt{}, false, err
	}
	if err := segment.ValidateAnchorID(anchor); err != nil {
		return Receipt{}, false, err
	}
	if db.filesOnly() {
		return Receipt{}, false, db.ro.noIndex
	}
	e, found, _, err := db.knownIdem(anchor, key)
	if err != nil || !found {
		return Receipt{}, false, err
	}
	return duplicateOf(e, anchor), true, nil
}

// refundDuplicates returns the rate-limit tokens of entries the commit found
// to be duplicates of a concurrent append with the same new key: budget is
// consumed once per record appended.
func (db *DB) refundDuplicates(entries []Entry, rs []Receipt, c *admission.Cost) {
	n := 0
	for i := range rs {
		if rs[i].Duplicate {
			n++
		}
	}
	if n == 0 {
		return
	}
	db.metrics.duplicates.Add(uint64(n))
	if !db.adm.RateLimited() {
		return
	}
	var back map[string]int
	for i := range rs {
		if rs[i].Duplicate && (c.Free == nil || !c.Free[i]) {
			if back == nil {
				back = map[string]int{}
			}
			back[entries[i].Anchor]++
		}
	}
	db.adm.ReturnTokens(back)
}

// writable returns why the database takes no writes, or nil.
func (db *DB) writable() error {
	if db.closed.Load() {
		return errClosed
	}
	if db.ro != nil {
		return db.ro.refuseWrite(db.dir)
	}
	if f := db.failed.Load(); f != nil {
		return f
	}
	return nil
}

// errClosed refuses a call made once Close has begun. It is admission's
// own value, so errors.Is matches it whichever part of the engine refused.
var errClosed = admission.ErrClosed

// The range of a record time, int64 Unix nanoseconds.
var (
	minRecordTime = time.Unix(0, math.MinInt64)
	maxRecordTime = time.Unix(0, math.MaxInt64)
)

// CheckRecordTime refuses a caller's record time that int64 Unix
// nanoseconds cannot hold (before 1677-09-21 or after 2262-04-11 UTC): it
// would be recorded as another time. The zero time means now, and passes.
func CheckRecordTime(t time.Time) error {
	if t.IsZero() || !t.Before(minRecordTime) && !t.After(maxRecordTime) {
		return nil
	}
	return errs.New(errs.CodeInvalidInput, "record time %s is outside the years 1678..2262 a record time can hold", t.UTC().Format(time.RFC3339Nano))
}

// CheckCallerCounter refuses, before anything is appended, a caller counter
// that no append may carry: above MaxCounter, or above MaxCallerCounter
// without an idempotency key. With a key, a counter above MaxCallerCounter
// may still be the retry of an append made before that limit, which gets its
// original receipt (SPEC §7); the leader refuses it only if it would be
// appended.
func CheckCallerCounter(c uint64, idempotent bool) error {
	if c > MaxCounter || (c > MaxCallerCounter && !idempotent) {
		return counterTooLarge(c)
	}
	return nil
}

// counterTooLarge is the refusal of a caller counter above MaxCallerCounter.
func counterTooLarge(c uint64) error {
	return errs.New(errs.CodeInvalidInput, "counter %d is above the limit %d for a counter a caller supplies", c, uint64(MaxCallerCounter))
}
