// Package testutil holds the helpers that tests of several packages share:
// error-code assertions, whole-file reads and writes on a vfs.FS, directory
// trees (list, compare, copy), crash clones that never meet a MemFS lock,
// descriptor counting, and the race detector's stride. It is for tests
// alone (internal/lint keeps it out of every package's code).
//
// It cannot hold helpers that need a package's unexported names: engine's
// database helpers stay in engine/helpers_test.go.
package testutil

import (
	"errors"
	"testing"

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
