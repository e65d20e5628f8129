package engine

import (
	"errors"
	"syscall"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
)

// File descriptors.
//
// A database holds descriptors for its segment files (the file cache), the
// index's tables (Pebble's own cache, bounded by its MaxOpenFiles), its
// journal (the current file and the one before until a sync covers it),
// the lock file, and for a moment each file or directory a settle fsyncs.
// The process that embeds it needs some for itself. The defaults are cut
// from the process's limit (RLIMIT_NOFILE, which Go raises to the hard
// limit at start): a reserve for the rest, a share for the index, and the
// segment cache gets what is left (fdBudget). Under `ulimit -n 256` a
// default cache of 256 files took every descriptor by itself, and the
// first open to fail stopped every write.
//
// An open that still fails for want of descriptors (EMFILE, ENFILE: the
// embedding program holds them, or the whole system is out) is pressure,
// not a failure of the disk. The file cache closes its idle files and tries
// again. A segment write that still gets none — its record is durable in
// the journal already — waits for one, up to fdPatience, and while it
// waits new appends are refused at once (CAP_001 capacity_exhausted, with
// RetryAfter) instead of piling up behind it; only a wait that outlasts
// fdPatience stops the database (IO_001), as a failed write does. A read
// that gets no descriptor is refused the same way.

// Descriptor budget constants.
const (
	// fdReserveMin and fdReserveShare set the reserve left to the journal,
	// the lock, settles and the program: max(fdReserveMin, limit/fdReserveShare).
	fdReserveMin   = 48
	fdReserveShare = 8
	// The index's share: a quarter of what the reserve leaves, at least
	// what Pebble keeps open anyway (64 tables and 10 other files), at
	// most Pebble's own default.
	indexFilesMin = 74
	indexFilesMax = 1000
	// The segment cache: what is left, within these bounds.
	fileCacheMin = 4
	fileCacheMax = 1024
	// fileCacheUnknown is the cache when the limit cannot be read.
	fileCacheUnknown = 256
)

// fdBudget splits limit descriptors between the segment file cache and
// the index's tables. A limit of 0 (unknown) gives the fixed defaults.
func fdBudget(limit uint64) (segments, indexFiles int) {
	if limit == 0 {
		return fileCacheUnknown, 0 // Pebble's own default
	}
	l := int(min(limit, 1<<30))
	reserve := max(fdReserveMin, l/fdReserveShare)
	left := max(l-reserve, 0)
	indexFiles = min(max(left/4, indexFilesMin), indexFilesMax)
	segments = min(max(left-indexFiles, fileCacheMin), fileCacheMax)
	return segments, indexFiles
}

// fdPatience bounds how long a segment write, a settle's fsync or a
// journal rotation waits for a descriptor before the database stops.
var fdPatience = 10 * time.Second

// fdRetryAfter is the RetryAfter of what descriptor pressure refuses.
const fdRetryAfter = 100 * time.Millisecond

// isFDPressure reports whether err is an open refused for want of
// descriptors: the process's (EMFILE) or the system's (ENFILE).
func isFDPressure(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// waitDescriptor calls open (which closes idle cached files before it
// tries) until it no longer fails for want of a descriptor, for at most
// fdPatience, and returns its last error. While it waits new appends are
// refused (fdRefusal).
func (db *DB) waitDescriptor(open func() error) error {
	deadline := time.Now().Add(fdPatience)
	wait := time.Millisecond
	for {
		db.fdPressure.Store(time.Now().Add(fdRetryAfter).UnixNano())
		db.metrics.fdWaits.Add(1)
		db.files.closeIdle()
		err := open()
		if err == nil || !isFDPressure(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(wait)
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// fdRefusal refuses an append while a write waits for a descriptor.
func (db *DB) fdRefusal() error {
	until := db.fdPressure.Load()
	if until == 0 || time.Now().UnixNano() >= until {
		return nil
	}
	r := errs.NewRefusal(errs.CodeCapacityExhausted, fdRetryAfter,
		"the process has no file descriptor to spare (EMFILE): a segment write waits for one, and the append was not taken")
	db.adm.Refused(r)
	return r
}

// fdReadRefusal is the refusal of a read that found no descriptor.
func fdReadRefusal(path string, err error) error {
	r := errs.NewRefusal(errs.CodeCapacityExhausted, fdRetryAfter, "no file descriptor to read %s: %v", path, err)
	return r
}
