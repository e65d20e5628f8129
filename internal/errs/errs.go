// Package errs defines the typed, coded errors of anchordb (CONTRACT §8).
//
// Every error a caller may act on is an *Error carrying a Code, or wraps
// one: an admission refusal (*RefusalError) unwraps to the *Error of its
// code, so one errors.As reads the code of every error. Callers test for a
// class of failure with errors.Is against the exported sentinels (which
// match on code alone) or extract the details with errors.As:
//
//	var e *errs.Error
//	if errors.As(err, &e) && e.Code == errs.CodeHashMismatch { … }
//
// The engine package re-exports these names so users never import internal.
package errs

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Code is a stable, machine-readable error code such as "INT_001".
type Code string

// The codes of CONTRACT §8.
const (
	CodeCapacityExhausted Code = "CAP_001"
	CodeQueueFull         Code = "CAP_002"
	CodeRateLimited       Code = "CAP_003"
	CodeScopeLocked       Code = "STATE_001"
	CodeConflict          Code = "STATE_002"
	CodeDependencyMissing Code = "STATE_003"
	CodeHashMismatch      Code = "INT_001"
	CodeChainBroken       Code = "INT_002"
	CodeSnapshotCorrupted Code = "INT_003"
	CodeIndexMismatch     Code = "INT_004"
	CodeSignatureInvalid  Code = "AUTH_003"
	CodeWriteFailed       Code = "IO_001"
	CodeInvalidInput      Code = "INPUT_001"
)

var reasons = map[Code]string{
	CodeCapacityExhausted: "capacity_exhausted",
	CodeQueueFull:         "queue_full",
	CodeRateLimited:       "rate_limited",
	CodeScopeLocked:       "scope_locked",
	CodeConflict:          "conflict_detected",
	CodeDependencyMissing: "dependency_missing",
	CodeHashMismatch:      "hash_mismatch",
	CodeChainBroken:       "chain_broken",
	CodeSnapshotCorrupted: "snapshot_corrupted",
	CodeIndexMismatch:     "index_mismatch",
	CodeSignatureInvalid:  "signature_invalid",
	CodeWriteFailed:       "write_failed",
	CodeInvalidInput:      "invalid_input",
}

// Reason returns the snake_case reason of CONTRACT §8 for the code.
func (c Code) Reason() string {
	if r, ok := reasons[c]; ok {
		return r
	}
	return "unknown"
}

// IsIntegrity reports whether the code is one of the INT_* or AUTH_* findings,
// the ones the CLI maps to exit status 1.
func (c Code) IsIntegrity() bool {
	return strings.HasPrefix(string(c), "INT_") || strings.HasPrefix(string(c), "AUTH_")
}

// Error is a coded anchordb error. Anchor, Seq, File and Offset locate the
// problem when it has a place (zero values mean "not applicable").
type Error struct {
	Code    Code
	Message string
	Anchor  string
	Seq     uint64
	File    string
	Offset  int64
	Err     error // the cause, if any
}

// Reason is the snake_case name of the code.
func (e *Error) Reason() string { return e.Code.Reason() }

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(string(e.Code))
	b.WriteByte(' ')
	b.WriteString(e.Code.Reason())
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, sentinel) true when err carries the sentinel's code.
// Only sentinels (an *Error with nothing but a Code) match this way, so two
// distinct findings never compare equal by accident.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.isSentinel() && t.Code == e.Code
}

// isSentinel reports whether e carries nothing but a Code.
func (e *Error) isSentinel() bool {
	return e.Message == "" && e.Err == nil && e.Anchor == "" && e.Seq == 0 && e.File == "" && e.Offset == 0
}

// New returns an *Error with a formatted message.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an *Error with a formatted message and a cause.
func Wrap(code Code, err error, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Err: err}
}

// At returns a copy of e located at an anchor, seq, file and offset.
func (e *Error) At(anchor string, seq uint64, file string, offset int64) *Error {
	c := *e
	c.Anchor, c.Seq, c.File, c.Offset = anchor, seq, file, offset
	return &c
}

// codeTextRE matches the "CODE reason" a coded error prints before its
// message, with the ": " after it when there is one.
var codeTextRE = regexp.MustCompile(`\b([A-Z]+_[0-9]{3}) ([a-z_]+)(: |$)`)

// Message returns err's text without the "CODE reason: " that coded errors
// print, for a place that carries the code and reason in fields of their
// own (the CLI's JSON error shape, a verify finding). A coded error wrapped
// in another prints its own code in the middle of the outer text
// ("inclusion proof: INPUT_001 invalid_input: hash …"): every one is
// dropped, not only the leading one. Only a code of CONTRACT §8 followed by its
// own reason is dropped. A nil err gives "".
func Message(err error) string {
	if err == nil {
		return ""
	}
	s := codeTextRE.ReplaceAllStringFunc(err.Error(), func(m string) string {
		sub := codeTextRE.FindStringSubmatch(m)
		if Code(sub[1]).Reason() != sub[2] {
			return m // not a code of CONTRACT §8 and its reason
		}
		return ""
	})
	return strings.TrimSuffix(s, ": ")
}

// CodeOf returns the code of the first *Error in err's chain (a
// *RefusalError unwraps to one), or "" when there is none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// IsCorruption reports whether err is an integrity finding (INT_*).
func IsCorruption(err error) bool {
	return strings.HasPrefix(string(CodeOf(err)), "INT_")
}

// RefusalError is an admission refusal (CAP_*): the engine is healthy but will
// not take the append now. RetryAfter is a hint, zero when unknown.
//
// It unwraps to an *Error of the same code, message and anchor, so
// errors.As(err, &e) with e an *Error reads the code of a refusal as of
// every other error; errors.As with a *RefusalError adds RetryAfter and the
// capacity state.
type RefusalError struct {
	Code       Code
	Reason     string
	RetryAfter time.Duration
	Message    string
	// Anchor names the anchor a per-anchor bound or rate limit refused.
	Anchor string
	// The capacity state when the refusal was made: records and bytes in
	// flight, and the bounds.
	InFlightRecords int
	InFlightBytes   int64
	MaxRecords      int
	MaxBytes        int64
}

func (r *RefusalError) Error() string {
	s := string(r.Code) + " " + r.Reason
	if r.Message != "" {
		s += ": " + r.Message
	}
	if r.RetryAfter > 0 {
		s += fmt.Sprintf(" (retry after %s)", r.RetryAfter)
	}
	return s
}

// Unwrap returns the refusal as an *Error: its Code, Message (with the
// retry hint) and Anchor. A new one each call; changing it changes nothing
// of r.
func (r *RefusalError) Unwrap() error {
	msg := r.Message
	if r.RetryAfter > 0 {
		if msg != "" {
			msg += " "
		}
		msg += fmt.Sprintf("(retry after %s)", r.RetryAfter)
	}
	return &Error{Code: r.Code, Message: msg, Anchor: r.Anchor}
}

// Is matches a sentinel *Error with the same code, so errors.Is(err,
// ErrQueueFull) works for refusals too. As for *Error.Is, only a sentinel
// (nothing but a Code) matches: a located *Error is another finding.
func (r *RefusalError) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.isSentinel() && t.Code == r.Code
}

// NewRefusal returns a refusal with the reason of its code.
func NewRefusal(code Code, retryAfter time.Duration, format string, args ...any) *RefusalError {
	return &RefusalError{Code: code, Reason: code.Reason(), RetryAfter: retryAfter, Message: fmt.Sprintf(format, args...)}
}

// Sentinels for errors.Is. They carry only a code.
var (
	ErrCapacityExhausted = &Error{Code: CodeCapacityExhausted}
	ErrQueueFull         = &Error{Code: CodeQueueFull}
	ErrRateLimited       = &Error{Code: CodeRateLimited}
	ErrScopeLocked       = &Error{Code: CodeScopeLocked}
	ErrConflict          = &Error{Code: CodeConflict}
	ErrDependencyMissing = &Error{Code: CodeDependencyMissing}
	ErrHashMismatch      = &Error{Code: CodeHashMismatch}
	ErrChainBroken       = &Error{Code: CodeChainBroken}
	ErrSnapshotCorrupted = &Error{Code: CodeSnapshotCorrupted}
	ErrIndexMismatch     = &Error{Code: CodeIndexMismatch}
	ErrSignatureInvalid  = &Error{Code: CodeSignatureInvalid}
	ErrWriteFailed       = &Error{Code: CodeWriteFailed}
	ErrInvalidInput      = &Error{Code: CodeInvalidInput}
)
