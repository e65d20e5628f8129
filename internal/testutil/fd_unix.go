//go:build unix

package testutil

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// OpenFDs counts this process's open descriptors (Linux only: ok is false
// elsewhere).
func OpenFDs() (n int, ok bool) {
	if runtime.GOOS != "linux" {
		return 0, false
	}
	ents, err := os.ReadDir("/proc/self/fd")
	return len(ents), err == nil
}

// OpenSegmentFDs counts this process's descriptors open on segment files
// under dir (Linux only: ok is false elsewhere).
func OpenSegmentFDs(dir string) (n int, ok bool) {
	if runtime.GOOS != "linux" {
		return 0, false
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, false
	}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.HasPrefix(target, dir) && strings.HasSuffix(target, ".seg") {
			n++
		}
	}
	return n, true
}

// LowerFDLimit lowers the soft limit on open descriptors to the number open
// now plus spare, and returns the function that restores it. Where the
// count or the limit cannot be had, it changes nothing.
func LowerFDLimit(t testing.TB, spare int) (restore func()) {
	n, ok := OpenFDs()
	if !ok {
		return func() {}
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		return func() {}
	}
	lim := old
	lim.Cur = uint64(n + spare)
	if lim.Cur >= old.Cur || syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return func() {}
	}
	t.Logf("descriptor limit lowered to %d (%d open)", lim.Cur, n)
	return func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) }
}
