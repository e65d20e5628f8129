// Package testutil holds the helpers that tests of several packages share:
// error-code assertions, whole-file reads and writes on a vfs.FS, directory
// trees (list, compare, copy), crash clones that never meet a MemFS lock,
// descriptor counting, the race detector's stride, and a hang detector for
// a state another goroutine reaches (WaitFor). It is for tests
// alone (internal/lint keeps it out of every package's code).
//
// It cannot hold helpers that need a package's unexported names: engine's
// database helpers stay in engine/helpers_test.go.
package testutil

import (
	"errors"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
)

// WantCode fails t unless err is, or wraps, an *errs.Error with code, and
// returns that error.
func WantCode(t testing.TB, err error, code errs.Code) *errs.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want code %s", code)
	}
	var e *errs.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("got %v (code %q), want code %s", err, errs.CodeOf(err), code)
	}
	return e
}

// WaitFor polls cond until it holds and fails t if it has not after a
// minute: a hang detector for a state another goroutine reaches (a waiter
// queued, a close begun), never a bound on how fast it gets there — the
// minute is for a race-detector run on a loaded 2-core machine.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
