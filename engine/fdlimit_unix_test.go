//go:build unix

package engine

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// openFDs counts this process's open descriptors (Linux only).
func openFDs() (int, bool) {
	if runtime.GOOS != "linux" {
		return 0, false
	}
	ents, err := os.ReadDir("/proc/self/fd")
	return len(ents), err == nil
}

// openSegmentFDs counts this process's descriptors open on segment files
// under dir (Linux only).
func openSegmentFDs(dir string) (int, bool) {
	if runtime.GOOS != "linux" {
		return 0, false
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, false
	}
	n := 0
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.HasPrefix(target, dir) && strings.HasSuffix(target, ".seg") {
			n++
		}
	}
	return n, true
}

// lowerFDLimit lowers the soft limit on open descriptors to the number open
// now plus spare, and returns the function that restores it.
func lowerFDLimit(t *testing.T, spare int) func() {
	n, ok := openFDs()
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
