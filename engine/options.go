package engine

import (
	"fmt"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/journal"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Options configure a database. The zero value is usable: Open fills in the
// defaults documented on each field.
type Options struct {
	// FS is the filesystem for every file the database touches — segments,
	// the Pebble index, locks, snapshots — so tests can crash or fail it as one.
	// Default vfs.Default.
	FS vfs.FS

	// ReadOnly opens an existing database without the write lock, writing
	// nothing at all: no lock file, journal, recovery, index write, id file
	// or damage mark. Appends and every other write are refused (IO_001,
	// errors.Is(err, ErrReadOnly)). When dir/LOCK exists a shared lock is
	// held on it, so no process opens the database for writing meanwhile.
	// Every read works when the index is current (the database was closed
	// cleanly). When it cannot be used — another process has the database
	// open for writing, or it was not closed cleanly and only a writer's
	// recovery would bring the index up to date — the database is read
	// from its files alone: Verify, Log, Record, ProveInclusion,
	// ProveConsistency, AnchorRoot, ProveRecord and the stored checkpoints
	// work, seeing a consistent prefix of each anchor, and the reads that
	// need the index are refused (STATE_001 naming the writer's pid,
	// STATE_003 otherwise); IndexUnavailable says why. See
	// docs/RELIABILITY.md, "Reading without the write lock".
	ReadOnly bool

	// NoSync makes appends return once the commit group's journal block has
	// been written to the OS, without waiting for an fsync. A process kill
	// loses nothing acknowledged; a power loss can lose the appends since the
	// last Sync, settle or Close. Default false: appends are durable.
	NoSync bool

	// SegmentSize is the size at which an anchor's active segment is sealed
	// and a new one started. Default 64 MiB.
	SegmentSize int64

	// Limits bound keys, values and idempotency keys (SPEC §9). Default
	// segment.DefaultLimits (64 KiB, 16 MiB, 256 bytes), when all three are
	// zero. One record at the limits, with RecordOverhead, must fit one
	// append (MaxBatchBytes), or Open refuses them.
	Limits segment.Limits

	// FileCacheSize bounds the segment files held open at once, so 100,000
	// anchors never need 100,000 descriptors. Default: cut from the
	// process's descriptor limit (RLIMIT_NOFILE) after a reserve for the
	// rest of the process (an eighth, at least 48) and the index's share (a
	// quarter of the remainder, 74 to 1,000, which also bounds Pebble's
	// MaxOpenFiles): what is left, 4 to 1,024 files (134 under a limit of
	// 256; 256 when the limit cannot be read). See docs/PERFORMANCE.md.
	FileCacheSize int

	// indexFiles is Pebble's MaxOpenFiles, from the same budget (0: Pebble's
	// default).
	indexFiles int

	// InlineValueMax is the largest value the index keeps inline so Get never
	// reads a segment; larger values are read from their segment. Default 4 KiB.
	InlineValueMax int

	// SettleBytes is how many bytes of journal may accumulate before the
	// segments behind them are fsynced, the index flushed and the journal
	// files dropped. Default 64 MiB.
	SettleBytes int64
	// SettleInterval settles at least this often while writes arrive.
	// Default 30 s.
	SettleInterval time.Duration
	// JournalPrealloc is how many bytes of zeros are kept written past the
	// last block of a busy journal file, so that a durable append's
	// fdatasync overwrites blocks the file already has instead of growing it
	// (which costs an inode commit as well). A file holding fewer bytes gets
	// as many zeros as it holds, and at least 1/64 of this. Default 4 MiB;
	// negative turns it off.
	JournalPrealloc int64

	// MaxInFlightRecords and MaxInFlightBytes bound the appends admitted but
	// not yet acknowledged (SPEC §8). Defaults 65,536 records and 256 MiB.
	// Acknowledged appends the index has yet to apply have a fixed bound of
	// their own (see DESIGN.md, "Acknowledged before applied").
	MaxInFlightRecords int
	MaxInFlightBytes   int64
	// RefuseWhenFull refuses an append at once with CAP_002 when the bound is
	// reached, instead of waiting until its context ends (CAP_001).
	RefuseWhenFull bool
	// MaxInFlightPerAnchor, if > 0, also bounds the records in flight for
	// any one anchor, so one busy anchor cannot take the whole bound.
	MaxInFlightPerAnchor int
	// AnchorRate, if > 0, limits each anchor to this many appended records a
	// second (a token bucket of AnchorBurst records, default max(1,
	// AnchorRate)); an append beyond it is refused at once with CAP_003 and
	// a RetryAfter. Duplicates never take tokens.
	AnchorRate  float64
	AnchorBurst int
	// DisableAdmission turns every bound and the rate limit off. It exists
	// to measure what admission costs (BenchmarkAppendSyncNoAdmission); an
	// engine without bounds can be driven out of memory.
	DisableAdmission bool

	// Clock supplies record times. Default time.Now.
	Clock func() time.Time

	// Logger receives recovery reports and background errors. Default: none.
	Logger Logger

	// fatalHook is for tests: see DB.fatalHook.
	fatalHook func(msg string)

	// rebuildFromSnapshot makes a rebuild of a missing index start from the
	// newest snapshot (set by RebuildIndex).
	rebuildFromSnapshot bool

	// PebbleOptions, if set, may adjust the index's Pebble options after the
	// defaults are applied (cache size, memtable size). The FS and logger are
	// set by the engine and must not be changed.
	PebbleOptions func(*pebble.Options)
}

// Logger is the logging interface the engine uses. Messages carry no
// prefix naming anchordb: a logger that shares its output with others adds
// its own (the CLI's prints "anchordb: ").
type Logger interface {
	Infof(format string, args ...any)
	Errorf(format string, args ...any)
}

type nopLogger struct{}

func (nopLogger) Infof(string, ...any)  {}
func (nopLogger) Errorf(string, ...any) {}

func (o Options) withDefaults() (Options, error) {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = 64 << 20
	}
	if o.Limits == (segment.Limits{}) {
		o.Limits = segment.DefaultLimits()
	}
	if o.FileCacheSize == 0 || o.indexFiles == 0 {
		files, index := fdBudget(descriptorLimit())
		if o.FileCacheSize == 0 {
			o.FileCacheSize = files
		}
		if o.indexFiles == 0 {
			o.indexFiles = index
		}
	}
	if o.InlineValueMax == 0 {
		o.InlineValueMax = 4 << 10
	}
	if o.SettleBytes == 0 {
		o.SettleBytes = 64 << 20
	}
	if o.SettleInterval == 0 {
		o.SettleInterval = 30 * time.Second
	}
	if o.JournalPrealloc == 0 {
		// Negative (off) stays negative: Options() hands these back, and
		// an Open with them must mean the same (withDefaults is idempotent).
		o.JournalPrealloc = journal.DefaultPrealloc
	}
	if o.MaxInFlightRecords == 0 {
		o.MaxInFlightRecords = 1 << 16
	}
	if o.MaxInFlightBytes == 0 {
		o.MaxInFlightBytes = 256 << 20
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = nopLogger{}
	}
	if err := o.Limits.Validate(); err != nil {
		return o, err
	}
	switch {
	case o.SegmentSize < 1<<10:
		return o, errs.New(errs.CodeInvalidInput, "segment size %d is below 1 KiB", o.SegmentSize)
	case o.SegmentSize > 1<<40:
		return o, errs.New(errs.CodeInvalidInput, "segment size %d is above 1 TiB", o.SegmentSize)
	case o.FileCacheSize < 4:
		return o, errs.New(errs.CodeInvalidInput, "file cache of %d files is below 4", o.FileCacheSize)
	case o.InlineValueMax < 0:
		return o, errs.New(errs.CodeInvalidInput, "inline value limit %d is negative", o.InlineValueMax)
	case o.JournalPrealloc > 1<<30:
		return o, errs.New(errs.CodeInvalidInput, "journal preallocation of %d bytes is above 1 GiB", o.JournalPrealloc)
	case o.SettleBytes < 0 || o.SettleInterval < 0:
		return o, errs.New(errs.CodeInvalidInput, "settle thresholds must not be negative")
	case o.MaxInFlightPerAnchor < 0 || !(o.AnchorRate >= 0) || o.AnchorBurst < 0:
		return o, errs.New(errs.CodeInvalidInput, "per-anchor bounds and rates must not be negative")
	case o.MaxInFlightRecords < 1 || o.MaxInFlightBytes < 1:
		return o, errs.New(errs.CodeInvalidInput, "in-flight bounds must be positive")
	case int64(o.Limits.MaxKey)+int64(o.Limits.MaxValue)+int64(o.Limits.MaxIdempotencyKey)+RecordOverhead > MaxBatchBytes:
		// segment.Limits allows what the format holds (512 MiB values);
		// a record one append cannot carry would pass the limits and
		// fail every append anyway, against another limit.
		return o, errs.New(errs.CodeInvalidInput, "key, value and idempotency key limits (%d, %d, %d) allow a record above the %d-byte limit of one append",
			o.Limits.MaxKey, o.Limits.MaxValue, o.Limits.MaxIdempotencyKey, MaxBatchBytes)
	case o.MaxInFlightBytes > MaxBatchBytes:
		// A commit group holds at most the in-flight bytes plus one request;
		// that must fit a journal block.
		return o, errs.New(errs.CodeInvalidInput, "in-flight byte bound %d is above %d", o.MaxInFlightBytes, MaxBatchBytes)
	}
	return o, nil
}

// WriteOption adjusts one append call.
type WriteOption func(*writeOptions)

type writeOptions struct {
	noSync    bool
	setNoSync bool
}

// WithNoSync overrides the database's durability mode for one call: true
// returns once the frame reaches the OS, false waits for the fsync.
func WithNoSync(noSync bool) WriteOption {
	return func(w *writeOptions) { w.noSync, w.setNoSync = noSync, true }
}

// DurabilityMode names the mode for reports: "sync" or "nosync".
func (o Options) DurabilityMode() string {
	if o.NoSync {
		return "nosync"
	}
	return "sync"
}

// String is the one-line summary a log or a report prints of the options
// that shape the files (durability, segment size, file cache), not every
// field.
func (o Options) String() string {
	return fmt.Sprintf("durability=%s segment_size=%d file_cache=%d", o.DurabilityMode(), o.SegmentSize, o.FileCacheSize)
}
