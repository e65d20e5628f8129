package engine

import (
	"fmt"

	"github.com/anchordb/anchordb/internal/errs"
)

// Error is the coded error type of anchordb (SPEC §8). Every error that
// carries a code is an *Error or wraps one — refusals, conflicts and forks
// included — so one errors.As reads the code, location and cause of any:
//
//	var e *engine.Error
//	if errors.As(err, &e) { … e.Code … }
//
// errors.Is against the sentinels below matches on the code alone.
type Error = errs.Error

// RefusalError is an admission refusal (CAP_*), with a RetryAfter hint and
// the capacity state. It unwraps to an *Error of its code, so errors.As
// with an *Error finds its code too; errors.As with a *RefusalError adds
// what only a refusal carries.
type RefusalError = errs.RefusalError

// Code is an error code such as "INT_001".
type Code = errs.Code

// Sentinels: errors.Is(err, engine.ErrConflict) is true for any STATE_002.
var (
	ErrCapacityExhausted = errs.ErrCapacityExhausted
	ErrQueueFull         = errs.ErrQueueFull
	ErrRateLimited       = errs.ErrRateLimited
	ErrScopeLocked       = errs.ErrScopeLocked
	ErrConflict          = errs.ErrConflict
	ErrDependencyMissing = errs.ErrDependencyMissing
	ErrHashMismatch      = errs.ErrHashMismatch
	ErrChainBroken       = errs.ErrChainBroken
	ErrSnapshotCorrupted = errs.ErrSnapshotCorrupted
	ErrIndexMismatch     = errs.ErrIndexMismatch
	ErrSignatureInvalid  = errs.ErrSignatureInvalid
	ErrWriteFailed       = errs.ErrWriteFailed
	ErrInvalidInput      = errs.ErrInvalidInput
)

// ErrNotFound is returned by Get when a key has no live value.
var ErrNotFound = fmt.Errorf("anchordb: not found")

// CodeOf returns the code carried by err, or "" if none: the Code of the
// *Error errors.As finds in it.
func CodeOf(err error) Code { return errs.CodeOf(err) }

// IsCorruption reports whether err is an integrity finding (INT_*).
func IsCorruption(err error) bool { return errs.IsCorruption(err) }

// ConflictError is the STATE_002 refusal of an idempotency key reused with a
// different request. It carries the original receipt and the first 8 bytes of
// both fingerprints in hex (SPEC §7).
type ConflictError struct {
	Original  Receipt
	Existing  string // fingerprint of the original request, first 8 bytes hex
	Requested string // fingerprint of this request, first 8 bytes hex
	err       *errs.Error
}

// Error is the coded message: STATE_002, the key, the original seq and both
// fingerprint prefixes.
func (e *ConflictError) Error() string { return e.err.Error() }

// Unwrap exposes the coded *Error so errors.As and CodeOf work.
func (e *ConflictError) Unwrap() error { return e.err }
