//go:build unix

package engine

import "syscall"

// descriptorLimit is the process's soft limit on open descriptors; 0 when
// it cannot be read or is unlimited.
func descriptorLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	if c := uint64(l.Cur); c != ^uint64(0) { // RLIM_INFINITY
		return c
	}
	return 0
}
