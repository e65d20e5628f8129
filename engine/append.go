package engine

import (
	"context"
	"fmt"
	"math"
	"time"

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
	// than the anchor's last counter (else STATE_002). Zero: the Lamport clock
	// assigns one.
	Counter uint64
	// Time, if nonzero, is recorded as the record time; zero: now.
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

// MaxCounter is the largest counter the engine accepts, so counters always
// fit a signed 64-bit integer (and JSON consumers that parse them as such).
const MaxCounter = math.MaxInt64

// Put appends a put of key=value to the anchor's log.
func (db *DB) Put(ctx context.Context, anchor string, key, value []byte, opts ...WriteOption) (Receipt, error) {
	return db.Append(ctx, Entry{Anchor: anchor, Type: segment.TypePut, Key: key, Value: value}, opts...)
}

// Delete appends a delete of key to the anchor's log.
func (db *DB) Delete(ctx context.Context, anchor string, key []byte, opts ...WriteOption) (Receipt, error) {
	return db.Append(ctx, Entry{Anchor: anchor, Type: segment.TypeDelete, Key: key}, opts...)
}

// Append appends one record and returns its receipt once it is durable (or,
// with NoSync, once it has reached the OS).
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
		if err := segment.ValidateContent(e.Anchor, e.Type, e.Key, e.Value, e.IdempotencyKey, db.opts.Limits); err != nil {
			if len(entries) > 1 {
				return nil, fmt.Errorf("entry %d: %w", i, err)
			}
			return nil, err
		}
		if e.Counter > MaxCounter {
			return nil, errs.New(errs.CodeInvalidInput, "counter %d is above the limit %d", e.Counter, uint64(MaxCounter))
		}
		bytes += int64(len(e.Key) + len(e.Value) + len(e.IdempotencyKey) + 128)
	}
	if bytes > MaxBatchBytes {
		return nil, errs.New(errs.CodeInvalidInput, "batch of %d bytes is above the %d-byte limit of one append", bytes, MaxBatchBytes)
	}
	if err := db.adm.acquire(ctx, len(entries), bytes, db.opts.RefuseWhenFull); err != nil {
		return nil, err
	}
	defer db.adm.release(len(entries), bytes)

	req := newRequest()
	req.entries, req.sync = entries, sync
	db.submit(req)
	rs, err := req.receipts, req.err
	freeRequest(req)
	if err != nil {
		return nil, err
	}
	return rs, nil
}

// writable returns why the database takes no writes, or nil.
func (db *DB) writable() error {
	if db.closed.Load() {
		return errClosed
	}
	if f := db.failed.Load(); f != nil {
		return f
	}
	return nil
}

var errClosed = errs.New(errs.CodeWriteFailed, "database is closed")
