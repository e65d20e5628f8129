package outbox

import (
	"errors"
	"fmt"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
)

// StateError is the outbox's STATE_002 conflict_detected: an enqueue that
// does not match the entry its id already names, a result (complete, fail,
// extend) under a lease that is not the entry's current one, a requeue of an
// entry in a state that cannot be requeued, a new id already in use. It
// carries the entry as it is (CONTRACT §12: every STATE_002 of the outbox carries
// the entry's state) and, for a fingerprint mismatch, the first 8 bytes of
// both fingerprints in hex. errors.As(err, &e) reads it; engine.CodeOf(err)
// is STATE_002.
type StateError struct {
	Outbox string
	ID     string
	// Entry is the entry as it is; its State is the state the refusal names.
	Entry Entry
	// Existing and Requested are set when the fingerprints differ: the
	// entry's and the request's, first 8 bytes in hex.
	Existing  string
	Requested string
	err       *engine.Error
}

// Error is the coded message: STATE_002, the entry, its state and why.
func (e *StateError) Error() string { return e.err.Error() }

// Unwrap exposes the coded *engine.Error, so errors.Is(err,
// engine.ErrConflict) and engine.CodeOf work.
func (e *StateError) Unwrap() error { return e.err }

// State is the entry's state: what the refusal names.
func (e *StateError) State() State { return e.Entry.State }

func stateErr(cur *Entry, format string, args ...any) *StateError {
	msg := fmt.Sprintf(format, args...)
	ce := errs.New(errs.CodeConflict, "outbox %q entry %q is %s: %s", cur.Outbox, cur.ID, cur.State, msg)
	ce.Anchor, ce.Seq = cur.Receipt.Anchor, cur.Receipt.Seq
	return &StateError{Outbox: cur.Outbox, ID: cur.ID, Entry: cur.clone(), err: ce}
}

func fingerprintErr(cur *Entry, requested segment.Hash) *StateError {
	ex, rq := segment.ShortHex(cur.Fingerprint, 8), segment.ShortHex(requested, 8)
	e := stateErr(cur, "enqueued with another payload or metadata: fingerprint %s, this request %s", ex, rq)
	e.Existing, e.Requested = ex, rq
	return e
}

// notFound is the STATE_003 of an id the outbox does not hold.
func notFound(name, id string) error {
	return errs.New(errs.CodeDependencyMissing, "outbox %q has no entry %q", name, id)
}

// permanentError marks a handler's error as permanent.
type permanentError struct{ err error }

func (p *permanentError) Error() string { return p.err.Error() }
func (p *permanentError) Unwrap() error { return p.err }

// Permanent marks err as a permanent failure: Fail (and Run, for a handler
// that returns it) makes the entry dead at once instead of retrying it.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or an error it wraps, was marked by
// Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

var errClosed = errs.New(errs.CodeWriteFailed, "outbox is closed")
