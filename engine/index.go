package engine

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// pebbleFatal is what Pebble's Fatalf becomes: a panic the engine recovers at
// the call into Pebble and turns into IO_001, instead of os.Exit.
type pebbleFatal string

type pebbleLogger struct {
	l  Logger
	db *DB // marked failed on a fatal error, so writes stop at once
}

func (pebbleLogger) Infof(string, ...any) {}

func (p pebbleLogger) Errorf(format string, args ...any) { p.l.Errorf("index: "+format, args...) }

// Fatalf is Pebble's fatal path. On the goroutines that call into Pebble
// the panic is recovered and becomes IO_001. On Pebble's own background
// goroutines (a MANIFEST write failing during a flush) nothing can recover
// it and the process ends, as with Pebble's default logger; the database is
// marked failed first, and the next Open recovers from the journal.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if p.db != nil {
		_ = p.db.fail(errs.New(errs.CodeWriteFailed, "index: %s", msg))
		if h := p.db.fatalHook; h != nil {
			h(msg)
		}
	}
	panic(pebbleFatal(msg))
}

func (db *DB) openIndex() (err error) {
	defer func() {
		// Pebble panics on its own when a directory fsync fails while it
		// opens (atomicfs markers); any panic here is an I/O failure of the
		// index, not a reason to take the process down.
		if r := recover(); r != nil {
			err = errs.New(errs.CodeWriteFailed, "open index: %v", r)
		}
	}()
	cache := pebble.NewCache(64 << 20)
	defer cache.Unref()
	po := &pebble.Options{
		FS:     db.fs,
		Cache:  cache,
		Logger: pebbleLogger{l: db.opts.Logger, db: db},
		// A large memtable keeps flushes (which, with no WAL, are what make
		// index rows durable) rare on the append path; settles flush anyway.
		MemTableSize:                64 << 20,
		MemTableStopWritesThreshold: 4,
		L0CompactionThreshold:       4,
		L0StopWritesThreshold:       24,
		FormatMajorVersion:          pebble.FormatNewest,
		// The journal is the index's log: every index row is derived from
		// records already in the journal, and recovery re-derives rows that
		// a crash lost. Only flushes make index rows durable.
		DisableWAL: true,
	}
	// A flush must never make durable an index row whose record is not yet
	// durable in the journal (a NoSync group's block may still be unsynced):
	// sync the journal before any flush writes a table.
	//
	// If that fsync fails, the flush must not happen, and Pebble cannot be
	// told not to flush: marking the database failed and letting it go on
	// made index rows durable ahead of their records, which a power loss
	// then turned into damage. So it takes Pebble's own fatal path, as a
	// failed MANIFEST write does: the process ends, the memtable (this
	// index has no WAL) with it, and the next Open recovers from the
	// journal and the segments.
	//
	// Only groups already applied can be in the memtable, so the sync goes
	// to the end of the last one, not to the end of the journal: sync
	// groups are durable before they are applied, so with no NoSync group
	// pending this is no fsync at all and cannot fail.
	po.EventListener = &pebble.EventListener{
		// A block that fails its checksum fails the read that found it,
		// with a corruption error; Pebble's default also calls Fatalf,
		// which would take the process down over a projection. Writes stop
		// instead (a compaction over the block would fail too, and the
		// stalled index would hang them), naming the cure.
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			if db.corruptionDuringOpen(info) {
				return
			}
			cure := "the next Open rebuilds it"
			if err := db.markIndexCorrupt(info); err != nil {
				db.opts.Logger.Errorf("%v", err)
				cure = "rebuild it: anchordb rebuild-index"
			}
			_ = db.fail(errs.New(errs.CodeIndexMismatch, "index corruption: %s; %s", info, cure))
		},
		FlushBegin: func(pebble.FlushInfo) {
			if err := db.syncIndexedJournal(); err != nil {
				pebbleLogger{l: db.opts.Logger, db: db}.Fatalf("journal fdatasync before an index flush failed: %v", err)
			}
		}}
	po.EnsureDefaults()
	if db.opts.indexFiles > 0 {
		po.MaxOpenFiles = db.opts.indexFiles // the descriptor budget (fdbudget.go)
	}
	if db.opts.PebbleOptions != nil {
		db.opts.PebbleOptions(po)
	}
	po.FS, po.Logger, po.DisableWAL = db.fs, pebbleLogger{l: db.opts.Logger, db: db}, true
	if db.ro != nil {
		db.readOnlyPebble(po)
	}
	db.pebbleOpts = po
	if r := db.retry; r != nil {
		where := "it was moved to " + r.aside
		if r.aside == "" {
			where = "it was gone already"
		}
		db.event(RecoveryEvent{Kind: EventIndexUnreadable, File: r.aside, Err: errs.Wrap(errs.CodeIndexMismatch, r.cause,
			"the index could not be read; %s and is rebuilt from the segments", where)})
	}
	idx, err := pebble.Open(db.fs.PathJoin(db.dir, IndexDir), po)
	if err != nil && indexUnreadable(err) {
		// Open moves it aside and tries again (db.go).
		return errs.Wrap(errs.CodeIndexMismatch, fmt.Errorf("%w: %w", errIndexUnreadable, err), "open index")
	}
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "open index")
	}
	db.index = idx
	return nil
}

// syncIndexedJournal fsyncs the journal up to the end of the last group
// applied to the index, so that every row the index holds names a durable
// record. Sync groups are durable before they are applied, so with no NoSync
// group pending it is no fsync at all.
func (db *DB) syncIndexedJournal() error {
	w := db.flushJournal.Load()
	if w == nil {
		return nil
	}
	db.indexedUpTo.Lock()
	upTo := db.indexedUpTo.pos
	db.indexedUpTo.Unlock()
	return w.SyncTo(upTo)
}

// errIndexUnreadable marks a pebble.Open that failed on the index's own
// bytes (indexUnreadable).
var errIndexUnreadable = errors.New("the index does not open")

// openGate holds back, while Open runs, a corruption Pebble reports on a
// read of its own (table stats, a compaction) that Open did not make: the
// database is not serving yet, so it is Open's to act on (move the index
// aside and rebuild it), not a reason to log that writes stopped on a
// database that a second try then opens.
type openGate struct {
	mu      sync.Mutex
	serving bool
	seen    error // the first corruption reported before serving
	marked  bool  // IndexCorruptMarker written by this session
}

// corruptionDuringOpen keeps a corruption reported before the database
// serves, and reports whether it did.
func (db *DB) corruptionDuringOpen(info pebble.DataCorruptionInfo) bool {
	g := &db.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.serving {
		return false
	}
	if g.seen == nil {
		g.seen = errs.Wrap(errs.CodeIndexMismatch, fmt.Errorf("%w: %s", errIndexUnreadable, info), "index corruption while opening")
	}
	return true
}

// IndexCorruptMarker is the file, under the database root, that records a
// corruption of the index met while the database ran (the DataCorruption
// event). An Open that finds it moves the index aside and rebuilds it, as
// for an index that does not open, and removes it once the new index is
// durable: a corrupt block that Open itself would not read (a running
// database meets it in a Get or a compaction) is still cured by a reopen.
const IndexCorruptMarker = "INDEX-CORRUPT"

// markIndexCorrupt writes the marker, durably, with what Pebble reported.
// The first report is enough; later ones leave it as it is.
func (db *DB) markIndexCorrupt(info pebble.DataCorruptionInfo) error {
	db.gate.mu.Lock()
	defer db.gate.mu.Unlock()
	if db.gate.marked {
		return nil
	}
	if err := writeFileAtomic(db.fs, db.dir, IndexCorruptMarker, []byte(info.String()+"\n")); err != nil {
		return fmt.Errorf("index corruption: recording it for the next Open failed: %w", err)
	}
	db.gate.marked = true
	return nil
}

// indexMarkedCorrupt reports whether the index was marked corrupt and
// returns why (an error that asks for the index to be moved aside), or the
// I/O error that kept it from reading the marker.
func (db *DB) indexMarkedCorrupt() (bool, error) {
	path := db.fs.PathJoin(db.dir, IndexCorruptMarker)
	f, err := fsutil.Open(db.fs, path, false)
	if oserrorIsNotExist(err) {
		return false, nil
	}
	var ee *fsutil.EntryError
	if errors.As(err, &ee) {
		// NB: not opened (a FIFO's open blocks). It is there, so the
		// index is marked; why cannot be read.
		return true, errs.Wrap(errs.CodeIndexMismatch, fmt.Errorf("%w: the marker %s", errIndexUnreadable, ee.Error()),
			"the index was found corrupt while the database ran (%s)", IndexCorruptMarker)
	}
	if err != nil {
		return true, errs.Wrap(errs.CodeWriteFailed, err, "open %s", path)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4<<10))
	if err != nil {
		return true, errs.Wrap(errs.CodeWriteFailed, err, "read %s", path)
	}
	return true, errs.Wrap(errs.CodeIndexMismatch, fmt.Errorf("%w: %s", errIndexUnreadable, strings.TrimSpace(string(b))),
		"the index was found corrupt while the database ran (%s)", IndexCorruptMarker)
}

// clearIndexCorrupt removes the marker from the database in dir, durably:
// once a rebuilt index is durable, or once rebuild-index has removed the
// index it named.
func clearIndexCorrupt(fs vfs.FS, dir string) error {
	path := fs.PathJoin(dir, IndexCorruptMarker)
	if err := fs.Remove(path); err != nil {
		if oserrorIsNotExist(err) {
			return nil
		}
		return errs.Wrap(errs.CodeWriteFailed, err, "remove %s", path)
	}
	return syncDirOf(fs, dir)
}

// serve ends Open's hold on corruption reports: from here on they stop
// writes. It returns the one reported during Open, if any; then the hold
// stays, for this database is not served (its index is moved aside, and a
// report while it closes is no running database's).
func (db *DB) serve() error {
	g := &db.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	g.serving = g.seen == nil
	return g.seen
}

// indexUnreadable reports whether pebble.Open failed on the index's own
// bytes — a corrupt file, or a file its MANIFEST or marker names that is
// not there — rather than on the filesystem (EIO, permissions), which must
// stop Open instead of costing a rebuild.
//
// A power loss can leave the second kind: when Pebble starts a MANIFEST (at
// every Open) it syncs the file, creates the marker naming it and only then
// syncs the directory, so a filesystem that may persist directory entries
// out of order can keep the marker and lose the MANIFEST's entry
// (TestCrashDuringCleanOpen finds it with vfs.CrashClone).
func indexUnreadable(err error) bool {
	return pebble.IsCorruptionError(err) || oserrorIsNotExist(err)
}

// moveIndexAside renames the index directory to lost+found/index-<ns>,
// durably, and returns the new path.
func (db *DB) moveIndexAside(path string) (string, error) {
	lf := db.fs.PathJoin(db.dir, LostAndFound)
	if err := db.fs.MkdirAll(lf, 0o755); err != nil {
		return "", errs.Wrap(errs.CodeWriteFailed, err, "create %s", lf)
	}
	if _, err := db.fs.Stat(path); oserrorIsNotExist(err) {
		// Nothing to move: a crash came between an earlier move and the
		// new index (IndexCorruptMarker asked for this one).
		return "", nil
	}
	// Named by the time, and never over an earlier one (a clock that
	// repeats, as a test's may, must not make every later Open fail).
	aside := db.fs.PathJoin(lf, fmt.Sprintf("%s-%d", IndexDir, db.opts.Clock().UnixNano()))
	for i := 1; ; i++ {
		if _, err := db.fs.Stat(aside); oserrorIsNotExist(err) {
			break
		} else if err != nil {
			return "", errs.Wrap(errs.CodeWriteFailed, err, "stat %s", aside)
		}
		aside = db.fs.PathJoin(lf, fmt.Sprintf("%s-%d-%d", IndexDir, db.opts.Clock().UnixNano(), i))
	}
	if err := db.fs.Rename(path, aside); err != nil {
		return "", errs.Wrap(errs.CodeWriteFailed, err, "move the unreadable index to %s", aside)
	}
	if err := db.syncDir(lf); err != nil {
		return "", err
	}
	if err := db.syncDir(db.dir); err != nil {
		return "", err
	}
	return aside, nil
}

func oserrorIsNotExist(err error) bool { return os.IsNotExist(err) || errorsIsNotExist(err) }
