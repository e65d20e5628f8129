package errs

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestMessage: Message drops every "CODE reason: " a coded error prints,
// however deep, and nothing else.
func TestMessage(t *testing.T) {
	inner := New(CodeHashMismatch, "record seq 7: stored hash differs")
	cases := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errors.New("plain"), "plain"},
		{New(CodeSnapshotCorrupted, "snapshot s: footer"), "snapshot s: footer"},
		{&Error{Code: CodeChainBroken}, ""},
		{Wrap(CodeIndexMismatch, inner, "'k' row"), "'k' row: record seq 7: stored hash differs"},
		{fmt.Errorf("stored checkpoint: %w", inner), "stored checkpoint: record seq 7: stored hash differs"},
		// Not a code of CONTRACT §8 with its own reason: kept.
		{errors.New("INT_001 chain_broken: x"), "INT_001 chain_broken: x"},
		{errors.New("anchor FOO_123 bar"), "anchor FOO_123 bar"},
	}
	for _, c := range cases {
		if got := Message(c.err); got != c.want {
			t.Errorf("Message(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// TestCodesOfTheContract pins the table of CONTRACT §8: every code, its reason, and
// how a refusal answers errors.Is, errors.As and CodeOf when wrapped.
func TestCodesOfTheContract(t *testing.T) {
	table := map[Code]string{
		"CAP_001": "capacity_exhausted", "CAP_002": "queue_full", "CAP_003": "rate_limited",
		"STATE_001": "scope_locked", "STATE_002": "conflict_detected", "STATE_003": "dependency_missing",
		"INT_001": "hash_mismatch", "INT_002": "chain_broken", "INT_003": "snapshot_corrupted", "INT_004": "index_mismatch",
		"AUTH_003": "signature_invalid", "IO_001": "write_failed", "INPUT_001": "invalid_input",
	}
	if len(reasons) != len(table) {
		t.Fatalf("%d codes defined, CONTRACT §8 has %d", len(reasons), len(table))
	}
	for code, reason := range table {
		if got := code.Reason(); got != reason {
			t.Errorf("%s: reason %q, want %q", code, got, reason)
		}
	}
	sentinels := map[Code]*Error{CodeCapacityExhausted: ErrCapacityExhausted, CodeQueueFull: ErrQueueFull, CodeRateLimited: ErrRateLimited}
	for code, sentinel := range sentinels {
		r := NewRefusal(code, 0, "bound reached")
		err := fmt.Errorf("entry 3: %w", r)
		var re *RefusalError
		if !errors.Is(err, sentinel) || !errors.As(err, &re) || re.Reason != table[code] || CodeOf(err) != code {
			t.Errorf("%s refusal wrapped: Is %v, As %v, CodeOf %s", code, errors.Is(err, sentinel), errors.As(err, &re), CodeOf(err))
		}
		if errors.Is(err, ErrConflict) {
			t.Errorf("%s refusal matches ErrConflict", code)
		}
		// Only sentinels match by code, as for *Error: a located error
		// with the same code is another finding.
		if errors.Is(err, &Error{Code: code, Anchor: "a"}) || errors.Is(err, &Error{Code: code, File: "f"}) {
			t.Errorf("%s refusal matches a located error of its code, not a sentinel", code)
		}
	}
}

// TestOneErrorsAsReadsEveryCode: for every code of CONTRACT §8, whatever the
// error type that carries it — an *Error made by New or Wrap, a
// *RefusalError, either wrapped again with %w — one errors.As with an
// *Error reads its code, CodeOf agrees, and errors.Is matches its sentinel.
// A refusal is still a *RefusalError to errors.As, RetryAfter included.
func TestOneErrorsAsReadsEveryCode(t *testing.T) {
	sentinel := map[Code]*Error{
		CodeCapacityExhausted: ErrCapacityExhausted, CodeQueueFull: ErrQueueFull, CodeRateLimited: ErrRateLimited,
		CodeScopeLocked: ErrScopeLocked, CodeConflict: ErrConflict, CodeDependencyMissing: ErrDependencyMissing,
		CodeHashMismatch: ErrHashMismatch, CodeChainBroken: ErrChainBroken, CodeSnapshotCorrupted: ErrSnapshotCorrupted,
		CodeIndexMismatch: ErrIndexMismatch, CodeSignatureInvalid: ErrSignatureInvalid, CodeWriteFailed: ErrWriteFailed,
		CodeInvalidInput: ErrInvalidInput,
	}
	if len(sentinel) != len(reasons) {
		t.Fatalf("%d sentinels for %d codes", len(sentinel), len(reasons))
	}
	for code := range reasons {
		made := map[string]error{
			"New":  New(code, "what happened"),
			"Wrap": Wrap(code, errors.New("cause"), "what happened"),
			"At":   New(code, "what happened").At("a", 7, "f", 9),
		}
		if code == CodeCapacityExhausted || code == CodeQueueFull || code == CodeRateLimited {
			r := NewRefusal(code, 250*time.Millisecond, "bound reached")
			r.Anchor = "a"
			made["NewRefusal"] = r
		}
		for how, err := range made {
			for _, wrapped := range []error{err, fmt.Errorf("context: %w", err)} {
				var e *Error
				if !errors.As(wrapped, &e) || e.Code != code {
					t.Errorf("%s %s (%T): errors.As with *Error: %v", code, how, wrapped, e)
					continue
				}
				if CodeOf(wrapped) != code || !errors.Is(wrapped, sentinel[code]) {
					t.Errorf("%s %s: CodeOf %q, Is its sentinel %v", code, how, CodeOf(wrapped), errors.Is(wrapped, sentinel[code]))
				}
				if how != "NewRefusal" {
					continue
				}
				var re *RefusalError
				if !errors.As(wrapped, &re) || re.RetryAfter != 250*time.Millisecond {
					t.Errorf("%s refusal: errors.As with *RefusalError: %v", code, re)
				}
				if e.Anchor != "a" || !strings.Contains(e.Error(), "bound reached") || !strings.Contains(e.Error(), "retry after 250ms") {
					t.Errorf("%s refusal as *Error: anchor %q, %q", code, e.Anchor, e.Error())
				}
			}
		}
	}
}
