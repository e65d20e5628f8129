// Package engine is the anchordb database: Open, Append, reads, group commit,
// recovery and admission. See the README and docs/DESIGN.md for the design.
package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anchordb/anchordb/engine/internal/admission"
	"github.com/anchordb/anchordb/engine/internal/gate"
	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/engine/internal/scratch"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/anchordb/anchordb/internal/journal"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// be is the byte order of every integer the engine writes.
var be = binary.BigEndian

// IndexDir is the directory of the Pebble index under the database root.
const IndexDir = "index"

// JournalDir is the directory of the journal under the database root.
const JournalDir = "journal"

// DB is an open anchordb database. It is safe for concurrent use.
type DB struct {
	dir   string
	opts  Options
	fs    vfs.FS
	lock  io.Closer
	index *pebble.DB
	// pebbleOpts are the options the index was opened with (a rebuild writes
	// tables with them).
	pebbleOpts *pebble.Options
	files      *fileCache
	id         string

	anchorsMu sync.RWMutex
	anchors   map[string]*anchor

	// commit is the commit pipeline (commit.go): group commit, the syncer,
	// the applier and what reads may see.
	commit commitPipeline
	// ingestMu runs one Ingest at a time; ingesting holds the anchors it is
	// joining, to which the leader refuses local appends (ingest.go).
	ingestMu  sync.Mutex
	ingesting atomic.Pointer[map[string]bool]
	// reserved holds the anchors clients reserved against Ingest (reserve.go).
	reserved reservations
	// reads holds Close off the index while reads use it (beginRead).
	reads gate.Gate
	// checkpointMu makes checkpoint creation one at a time: each must see
	// the one before it (it was one lock for the whole process, held across
	// a settle's fsyncs since checkpoints sign only durable records).
	checkpointMu sync.Mutex
	journal      *journal.Writer
	// flushJournal is the journal as seen by the index's flush hook, which
	// runs on Pebble's goroutines.
	flushJournal atomic.Pointer[journal.Writer]
	// indexedUpTo is the journal position after the last group applied to
	// the index: what the flush hook must have durable before a flush.
	indexedUpTo struct {
		sync.Mutex
		pos journal.Pos
	}
	// stagedUpTo is the journal position after the last group whose
	// segment bytes the applier has buffered: a buffer reaches its file
	// only once the journal is durable up to there (segsync.go).
	stagedUpTo struct {
		sync.Mutex
		pos journal.Pos
	}
	// Owned by the commit leader.
	journalBytes int64         // since the last settle
	clock        atomic.Uint64 // the Lamport clock, as far as the leader got

	// Idempotency keys of groups written but not yet applied: the next leader
	// must see them before the index does.
	idemMu      sync.Mutex
	pendingIdem map[string]pendingIdem

	// Segment bytes buffered per anchor (see segwrite.go).
	bufMu           sync.Mutex
	bufferedAnchors map[*anchor]struct{}
	buffered        atomic.Int64

	dirtyMu    sync.Mutex
	dirtyFiles map[string]struct{} // segments written since the last settle
	dirtyDirs  map[string]struct{} // directories whose entries changed

	metrics  metrics
	adm      *admission.Controller
	failed   atomic.Pointer[errs.Error]
	closed   atomic.Bool
	settleCh chan struct{}
	damaged  damageQueue // anchors found damaged after Open (damage.go)
	stopBg   chan struct{}
	settler  sync.WaitGroup // the settle loop
	cutsMu   sync.Mutex
	cuts     map[string]uint64 // anchor → first seq still in a segment (cutOf)
	// truncating is held (write) by a truncation while it applies its batch
	// and forgets the anchor's cut, and (read) by GetAt from its cut check
	// to its read of the versions: the two then agree.
	truncating sync.RWMutex
	// removing is held (write) by a truncation from its batch to the removal
	// of the file, and (read) by Verify while it compares files with its
	// index snapshot (verify.go): so it never meets a segment gone under it.
	removing sync.RWMutex
	// histFrom is the frontier below which a rebuild from a snapshot indexed
	// only the snapshot's state (schema.MetaHistoryFrom); nil when every version is
	// indexed. Set at open, read-only after.
	histFrom map[string]uint64
	settleMu sync.Mutex // one settle at a time
	// mergeBatch is the applier's: the index batches of groups applied
	// together are merged into it (applyGroups).
	mergeBatch *pebble.Batch
	// invariantLastApplied is the last group the applier applied, kept
	// only for the invariant checks (invariants.go).
	invariantLastApplied uint64
	// segIO is held shared by every segment write and seal, and exclusively
	// by a settle checking, after its fsyncs, that none of them failed.
	segIO     sync.RWMutex
	compactMu sync.Mutex // one compaction at a time

	// created is set when this Open created the database (discard.go).
	created *creation

	recoveryMu sync.Mutex
	recovery   RecoveryReport // what Open found; damage found later is added
	// fatalHook, set by tests only, runs on Pebble's fatal path just before
	// the panic that ends the process (see pebbleLogger.Fatalf).
	fatalHook func(msg string)
	opened    time.Time
	// retry is set on Open's second try, after the first moved an
	// unreadable index aside; gate holds corruption reports until Open ends.
	retry *indexRetry
	gate  openGate
	// ro is set by a read-only open (readonly.go).
	ro *readOnly
	// fdPressure is, in Unix ns, until when appends are refused because a
	// write waits for a file descriptor (fdbudget.go); 0: none.
	fdPressure atomic.Int64

	// testVerifyPrepared, when set (by tests), runs in Verify once it has
	// taken its index snapshot, before it reads any file.
	testVerifyPrepared func()
}

// Open opens (creating if needed) the database in dir for reading and
// writing. It takes the directory's write lock (STATE_001 if another process
// holds it) and recovers from any crash before returning: see
// DB.RecoveryReport for what recovery did. With Options.ReadOnly it opens
// an existing database without the lock and writes nothing (readonly.go).
func Open(dir string, opts Options) (*DB, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if opts.ReadOnly {
		return openReadOnly(dir, opts)
	}
	fs := opts.FS
	made := missingDirs(fs, dir)
	if err := mkdirAllSynced(fs, dir); err != nil {
		if e := checkIsDir(fs, dir); e != nil {
			return nil, e
		}
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "create database directory %s", dir)
	}
	_, lockErr := fs.Stat(fs.PathJoin(dir, lockFileName))
	lock, err := lockDir(fs, dir)
	if err != nil {
		// A path that is no directory fails here first (when it exists,
		// nothing is created): say so, not what failed under it.
		if e := checkIsDir(fs, dir); e != nil {
			return nil, e
		}
		return nil, err
	}
	// Under the lock: a directory holding nothing but the lock file is a
	// database this Open creates (Discard may remove it again).
	var created *creation
	if names, err := fs.List(dir); err == nil && len(names) == 1 && names[0] == lockFileName {
		created = &creation{dirs: made, lock: lockErr != nil}
	}
	db, err := openLocked(dir, opts, lock)
	if err != nil {
		return nil, err
	}
	db.created = created
	return db, nil
}

// openLocked is Open under the write lock the caller took, which the
// database then holds (closed with it, or here when the open fails). opts
// have their defaults.
func openLocked(dir string, opts Options, lock io.Closer) (*DB, error) {
	db, retry, err := openOnce(dir, opts, lock, nil)
	if retry != nil {
		// The first try moved an unreadable index aside: rebuild it,
		// under the same lock.
		db, _, err = openOnce(dir, opts, lock, retry)
	}
	if err != nil {
		_ = lock.Close()
		return nil, err
	}
	return db, nil
}

// indexRetry is what an Open that could not read the index hands the
// second try, after moving the index aside.
type indexRetry struct {
	aside string // where the index went
	cause error  // why it could not be read
	// events are what the first try's recovery did to the files before it
	// met the unreadable index: cuts and removals the second try finds
	// done and would not report, and where a journal it dropped ended.
	events []RecoveryEvent
	// logged says the first try logged its events (it ran recovery to its
	// end): the second try reports the carried ones but does not log them
	// again.
	logged bool
	// damaged are the anchors the first try found damaged. Some damage
	// only the index could show (records it vouched for missing from a
	// segment), so the second try marks them again before it looks at
	// their files, and leaves those as they are (SPEC §3).
	damaged []RecoveryEvent
}

// carriedEvents are the kinds of recovery event a second try finds already
// done to the files, so only the first try can report them. A journal_end
// is carried too when the first try dropped that journal.
var carriedEvents = []string{EventRestored, EventCut, EventRemoved, EventTruncationFinished}

// openOnce opens the database once, under lock (which the returned
// database owns; on failure the caller closes it). When Pebble refuses the
// index for its own bytes, or a block of it fails its checksum while Open
// reads it, the index is moved aside and the returned indexRetry asks
// for a second try, which rebuilds it from the segments like a lost one
// (retry says what the first try did). The index is a projection (SPEC §3).
func openOnce(dir string, opts Options, lock io.Closer, retry *indexRetry) (*DB, *indexRetry, error) {
	fs := opts.FS
	db := &DB{
		dir: dir, opts: opts, fs: fs, lock: lock,
		anchors:         make(map[string]*anchor),
		dirtyFiles:      make(map[string]struct{}),
		dirtyDirs:       make(map[string]struct{}),
		settleCh:        make(chan struct{}, 1),
		stopBg:          make(chan struct{}),
		pendingIdem:     make(map[string]pendingIdem),
		cuts:            make(map[string]uint64),
		bufferedAnchors: make(map[*anchor]struct{}),
		opened:          time.Now(),
		retry:           retry,
	}
	if retry != nil {
		db.recovery.Events = append(db.recovery.Events, retry.events...)
	}
	db.commit.init(db.commitEnv())
	db.files = newFileCache(fs, opts.FileCacheSize)
	db.fatalHook = opts.fatalHook
	db.adm = admission.New(admissionConfig(&opts))
	var err error
	opened := false // open ran to its end: recovery settled, the journal restarted
	if marked, cause := db.indexMarkedCorrupt(); marked && (retry == nil || !errors.Is(cause, errIndexUnreadable)) {
		err = cause // moved aside below without opening it, or an I/O error
	} else {
		err = db.open()
		opened = err == nil
	}
	if err == nil {
		// A corruption Pebble met while Open ran, on a read that did not
		// fail Open itself (table stats, a compaction), is Open's too.
		err = db.serve()
	}
	if err == nil && retry != nil {
		// The rebuilt index is durable (Open settled) and nothing found it
		// corrupt: the marker that may have asked for it has done its work.
		err = clearIndexCorrupt(db.fs, db.dir)
	}
	if err != nil {
		if db.journal != nil {
			_ = db.journal.Close()
		}
		if db.index != nil {
			_ = db.closeIndex()
		}
		_ = db.files.close()
		if (errors.Is(err, errIndexUnreadable) || pebble.IsCorruptionError(err)) && retry == nil {
			aside, merr := db.moveIndexAside(db.fs.PathJoin(dir, IndexDir))
			if merr != nil {
				// An I/O failure (IO_001), whatever the index's state.
				return nil, nil, errs.Wrap(errs.CodeWriteFailed, errors.Join(merr, err), "the index could not be read, and moving it aside failed")
			}
			next := &indexRetry{aside: aside, cause: err, logged: opened}
			for _, ev := range db.RecoveryReport().Events {
				switch {
				case ev.Kind == EventDamaged:
					next.damaged = append(next.damaged, ev)
				case slices.Contains(carriedEvents, ev.Kind),
					ev.Kind == EventJournalEnd && opened: // that journal is gone
					next.events = append(next.events, ev)
				}
			}
			return nil, next, nil
		}
		return nil, nil, err
	}
	db.settler.Add(1)
	db.commit.start()
	go db.settleLoop()
	return db, nil, nil
}

func (db *DB) open() error {
	if err := db.openIndex(); err != nil {
		return err
	}
	format, fresh, err := db.metaUint(schema.MetaFormat)
	if err != nil {
		return err
	}
	if !fresh && format != schema.Format {
		return errs.New(errs.CodeInvalidInput, "index format %d is not supported (want %d); run rebuild-index", format, schema.Format)
	}
	if db.id, err = db.loadOrCreateID(); err != nil {
		return err
	}
	if fresh {
		if err := db.initIndex(); err != nil {
			return err
		}
	}
	if db.histFrom, err = loadHistoryFrom(db.index); err != nil {
		return err
	}
	clean, _, err := db.metaUint(schema.MetaClean)
	if err != nil {
		return err
	}
	clock, _, err := db.metaUint(schema.MetaClock)
	if err != nil {
		return err
	}
	db.clock.Store(clock)
	stale := false
	if !fresh {
		// An older copy of the index (restored from a backup, say) would
		// hide everything written since: see indexIsStale.
		if stale, err = db.indexIsStale(clean == 1); err != nil {
			return err
		}
		if stale {
			clean = 0
			db.event(RecoveryEvent{Kind: EventStaleIndex, Err: errs.New(errs.CodeIndexMismatch,
				"the index is older than the journal: it was replaced by an older copy; recovering from the segments")})
		}
	}
	db.recovery.Clean = clean == 1
	if stale {
		// Before recovery, whose settle makes the row durable.
		if err := db.catchUpAuditHead(); err != nil {
			return err
		}
	}
	if clean != 1 {
		if err := db.recover(stale); err != nil {
			return err
		}
	}
	if err := db.reportStoredDamage(); err != nil {
		return err
	}
	if err := db.removeLeftovers(); err != nil {
		return err
	}
	// From here a crash is unclean: recovery must look at the tails. The
	// mark goes down before the session's journal file exists, or a crash
	// between the two would leave a clean index older than the journal,
	// which the next Open would take for a restored copy (stale_index).
	if err := db.setMetaDurable(schema.MetaClean, 0); err != nil {
		return err
	}
	if err := db.startJournal(); err != nil {
		return err
	}
	events := db.recovery.Events
	if db.retry != nil && db.retry.logged {
		events = events[len(db.retry.events):] // the carried ones lead
	}
	for _, ev := range events {
		db.opts.Logger.Infof("recovery: %s", ev)
	}
	return nil
}

// clearIndex deletes every row of the index. An index that is already empty
// (the usual case: rebuild-index removed it) is left without a range
// tombstone: one in the memtable overlaps every table a fast rebuild
// ingests, which then lands in L0 and costs a full compaction before Close.
func (db *DB) clearIndex() error {
	it, err := db.index.NewIter(nil)
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "read index")
	}
	empty := !it.First()
	if err := it.Close(); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "read index")
	}
	if empty {
		return nil
	}
	if err := db.index.DeleteRange([]byte{0}, []byte{0xFF}, pebble.NoSync); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "clear index")
	}
	return nil
}

// initIndex sets up a new index. If segments or journal records exist (the
// index was lost or deleted), it is rebuilt from them first.
func (db *DB) initIndex() error {
	// A crash during an earlier rebuild can leave rows without the format row:
	// start from nothing.
	if err := db.clearIndex(); err != nil {
		return err
	}
	// What was acknowledged since the last settle may be in the journal
	// alone (its segment bytes, even its anchor's directory, lost in a
	// crash): put it back in the segments first, as recovery does, or the
	// rebuild would index the segments without it and the next journal
	// would drop it.
	if err := db.replayJournal(); err != nil {
		return err
	}
	db.anchorsMu.RLock()
	replayed := len(db.anchors) > 0
	db.anchorsMu.RUnlock()
	// Where the first try of this Open (if this is the second) found damage,
	// the rebuild leaves the files as they are.
	if err := db.markCarriedDamage(); err != nil {
		return err
	}

	exists, err := db.hasSegments()
	if err != nil {
		return err
	}
	if exists {
		db.recovery.Rebuilt = true
		fast := false
		carriedDamage := db.retry != nil && len(db.retry.damaged) > 0
		if db.opts.rebuildFromSnapshot && replayed {
			// The replay loaded anchor heads the fast path would not
			// update; a journal with records in it is a crash's aftermath,
			// which the full replay is for.
			db.event(RecoveryEvent{Kind: EventFastRebuildAbandoned,
				Note: "the journal holds records not yet settled: rebuilding by full replay"})
		} else if db.opts.rebuildFromSnapshot && carriedDamage {
			// The full replay is what leaves a damaged anchor's files alone.
			db.event(RecoveryEvent{Kind: EventFastRebuildAbandoned,
				Note: "anchors were found damaged: rebuilding by full replay"})
		} else if db.opts.rebuildFromSnapshot {
			switch err := db.rebuildFromSnapshot(context.Background()); {
			case err == nil:
				fast = true
			case errors.Is(err, errFastPathAbandoned):
				// Start again from nothing with a full replay.
				if err := db.clearIndex(); err != nil {
					return err
				}
			default:
				return err
			}
		}
		if !fast {
			if err := db.reconcileAll(true); err != nil {
				return err
			}
		}
		if err := db.settleAll(); err != nil {
			return err
		}
	}
	auditRow, err := db.adoptedAuditHead()
	if err != nil {
		return err
	}
	b := db.index.NewBatch()
	if auditRow != nil {
		_ = b.Set(schema.MetaKey(schema.MetaAudit), auditRow, nil)
	}
	_ = b.Set(schema.MetaKey(schema.MetaDBID), []byte(db.id), nil)
	_ = b.Set(schema.MetaKey(schema.MetaClean), be.AppendUint64(nil, 1), nil)
	_ = b.Set(schema.MetaKey(schema.MetaClock), be.AppendUint64(nil, db.clock.Load()), nil)
	_ = b.Set(schema.MetaKey(schema.MetaFormat), be.AppendUint64(nil, schema.Format), nil)
	if err := b.Commit(pebble.NoSync); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "initialise index")
	}
	_ = b.Close()
	return db.flushIndex()
}

// markCarriedDamage marks, on Open's second try, the anchors the first
// found damaged, before the rebuild looks at their files.
func (db *DB) markCarriedDamage() error {
	if db.retry == nil {
		return nil
	}
	for _, ev := range db.retry.damaged {
		a, err := db.getAnchor(ev.Anchor, true)
		if err != nil {
			return err
		}
		e := ev.Err
		if e == nil {
			e = errs.New(errs.CodeChainBroken, "anchor %q was found damaged", ev.Anchor)
		}
		db.markDamaged(a, e)
	}
	return nil
}

// removeLeftovers deletes what an interrupted operation of an earlier session
// left behind: scratch stores of snapshot replays, temporary files of
// snapshots, of lost+found copies and of the corruption marker. The writer
// lock makes this safe.
func (db *DB) removeLeftovers() error {
	// A crash while IndexCorruptMarker was being written leaves its temp.
	if err := db.fs.Remove(db.fs.PathJoin(db.dir, IndexCorruptMarker+".tmp")); err != nil && !oserrorIsNotExist(err) {
		return errs.Wrap(errs.CodeWriteFailed, err, "remove %s.tmp", IndexCorruptMarker)
	}
	if err := scratch.RemoveAll(db.fs, db.dir); err != nil {
		return err
	}
	if _, err := snapshot.CleanTemp(db.fs, db.SnapshotsDir()); err != nil {
		return err
	}
	lf := db.fs.PathJoin(db.dir, LostAndFound)
	names, err := fsutil.List(db.fs, lf) // NB: not fs.List: that of a FIFO blocks
	if err != nil {
		return nil // no lost+found (or none that is a directory)
	}
	for _, n := range names {
		if strings.HasSuffix(n, ".tmp") {
			if err := db.fs.Remove(db.fs.PathJoin(lf, n)); err != nil {
				return errs.Wrap(errs.CodeWriteFailed, err, "remove %s", n)
			}
		}
	}
	return nil
}

func (db *DB) journalDir() string { return db.fs.PathJoin(db.dir, JournalDir) }

// startJournal starts a fresh journal file after recovery (or a clean
// close) has made everything in the old ones durable elsewhere, records it as
// the settle point, and removes the old files.
func (db *DB) startJournal() error {
	dir := db.journalDir()
	if err := mkdirAllSynced(db.fs, dir); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "create %s", dir)
	}
	gens, err := journal.List(db.fs, dir)
	if err != nil {
		return entryErr(err, errs.CodeChainBroken, "list "+dir)
	}
	gen := uint64(1)
	if len(gens) > 0 {
		gen = gens[len(gens)-1] + 1
	}
	w, err := journal.Create(db.fs, dir, gen, journal.Options{
		Prealloc: max(db.opts.JournalPrealloc, 0),
		PreallocFailed: func(gen uint64, err error) {
			db.opts.Logger.Errorf("journal %s: writing zeros ahead of its blocks failed (its fsyncs will grow the file from here): %v", journal.FileName(gen), err)
		},
	})
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "start journal")
	}
	db.journal = w
	db.flushJournal.Store(w)
	return db.recordSettled(journal.Pos{Gen: gen})
}

// indexIsStale reports whether the index is an older copy than the one the
// journal was last settled against. Journal files before a settle point
// are removed only after an index holding that point is durable, so the
// index that was last settled names a journal file that still exists (or
// one newer than all). A settle point older than every journal file means
// that a later settle happened and this index has not seen it, whether or
// not the copy was taken while the database was open. A clean index must
// also be the one the last session closed: its settle point names the
// newest journal file (after a crash, an unclean one may name an older
// file, the journal having moved on since).
func (db *DB) indexIsStale(clean bool) (bool, error) {
	b, ok, err := db.metaBytes(schema.MetaSettled)
	if err != nil || !ok {
		return false, err
	}
	at, err := journal.DecodePos(b)
	if err != nil {
		return false, errs.Wrap(errs.CodeIndexMismatch, err, "settle point")
	}
	gens, err := journal.List(db.fs, db.journalDir())
	if err != nil {
		return false, entryErr(err, errs.CodeChainBroken, "list the journal")
	}
	if len(gens) == 0 {
		return false, nil
	}
	return at.Gen < gens[0] || clean && gens[len(gens)-1] > at.Gen, nil
}

// IDFile holds the database id under the root. The id names the database in
// checkpoints, so it lives beside the segments, not only in the index: a
// rebuilt index keeps it.
const IDFile = "DBID"

func (db *DB) hasSegments() (bool, error) {
	fans, err := fsutil.List(db.fs, db.fs.PathJoin(db.dir, "anchors"))
	if err != nil {
		if oserrorIsNotExist(err) {
			return false, nil
		}
		return false, entryErr(err, errs.CodeChainBroken, "list anchors")
	}
	return len(fans) > 0, nil
}

// ID returns the database's random identifier, fixed at creation.
func (db *DB) ID() string { return db.id }

// Dir returns the database directory.
func (db *DB) Dir() string { return db.dir }

// FS returns the filesystem the database uses.
func (db *DB) FS() vfs.FS { return db.fs }

// Options returns the options in effect, defaults filled in.
func (db *DB) Options() Options { return db.opts }

// fail stops all writes after an I/O failure (SPEC §3: a failed fsync is
// never retried). It returns the error every later write gets.
func (db *DB) fail(err error) error {
	var e *errs.Error
	if !errors.As(err, &e) || e.Code != errs.CodeWriteFailed {
		e = errs.Wrap(errs.CodeWriteFailed, err, "write failed")
	}
	stopped := errs.Wrap(errs.CodeWriteFailed, e, "the database stopped accepting writes")
	if db.failed.CompareAndSwap(nil, stopped) {
		db.opts.Logger.Errorf("%v", stopped)
		db.commit.vis.wake() // readers waiting for the applier wait no longer
	}
	return db.failed.Load()
}

// Close waits for in-flight appends, syncs every segment, marks the database
// cleanly closed and releases its lock. After a write failure it closes
// without marking clean, so the next Open runs recovery. Calls made after
// Close has begun return IO_001 ("database is closed"); those already under
// way finish first: appends and what settles through group commit (Sync,
// CreateCheckpoint, Compact, Ingest) before it settles, reads (range loops
// included, until their loop ends), Verify and CreateSnapshot before it
// closes the index. A range loop its consumer holds open holds Close too.
func (db *DB) Close() error {
	if !db.closed.CompareAndSwap(false, true) {
		return errClosed
	}
	return errors.Join(db.shut(), ioErr(db.lock.Close(), "release lock"))
}

// shut is Close but for the release of the lock.
func (db *DB) shut() error {
	if db.ro != nil {
		return db.shutReadOnly()
	}
	db.adm.Drain()
	close(db.stopBg)
	// The settle loop may be inside a settle whose mark is queued for the
	// applier: let it finish before the applier goes.
	db.settler.Wait()
	var err error
	if db.failed.Load() == nil {
		err = db.settle()
		if err == nil {
			err = db.setMetaDurable(schema.MetaClean, 1)
		}
	}
	db.commit.close()
	if db.mergeBatch != nil {
		// The applier has stopped: its kept batch (up to
		// mergeBatchRetained of buffer) goes back to Pebble's pool.
		_ = db.mergeBatch.Close()
		db.mergeBatch = nil
	}
	// Reads in progress finish before the index and the segment files
	// close under them; later ones are refused.
	db.reads.Drain()
	if err == nil && db.failed.Load() == nil {
		err = db.recordLateDamage() // found by the reads just waited for
	}
	return errors.Join(err, ioErr(db.journal.Close(), "close journal"), db.closeIndex(),
		ioErr(db.files.close(), "close segments"))
}

func (db *DB) closeIndex() (err error) {
	defer func() {
		if r := recover(); r != nil {
			if pf, ok := r.(pebbleFatal); ok {
				err = errs.New(errs.CodeWriteFailed, "close index: %s", string(pf))
				return
			}
			panic(r)
		}
	}()
	return ioErr(db.index.Close(), "close index")
}
