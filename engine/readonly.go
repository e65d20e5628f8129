package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/anchordb/anchordb/engine/internal/admission"
	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A read-only open (Options.ReadOnly, SPEC §13) writes nothing: no lock
// file, journal, recovery, id file, index row, damage mark or scratch file
// under the database directory. It holds a shared lock on LOCK when the
// file is there (readLockDir), which keeps writers out while it reads. It
// then uses the index when the index is current: the database was closed
// cleanly, and by the last session (not an older copy of the index). Any
// other state of the index would need a writer's recovery before it could
// be trusted, so the index is not opened, and the database is read from its
// files alone (filelog.go): Verify, Log, Record, the proofs and the stored
// checkpoints work; the reads that need the index are refused with why.

// ErrReadOnly is the cause of every write a read-only open refuses
// (IO_001): errors.Is(err, ErrReadOnly).
var ErrReadOnly = errors.New("the database was opened read-only")

// readOnly is the state of a read-only open.
type readOnly struct {
	// noIndex is why the index is not used (nil: it is), returned by every
	// read that needs it: STATE_001 when a writer holds the database,
	// STATE_003 when the index is not current.
	noIndex *errs.Error
	// why is noIndex's reason alone, for a check's report.
	why string
}

// filesWork is what a refused read's message says works without the index.
const filesWork = "verify, log, prove and the checkpoint checks read the files and work regardless"

func (r *readOnly) refuseWrite(dir string) error {
	return errs.Wrap(errs.CodeWriteFailed, ErrReadOnly, "database %s takes no writes", dir)
}

// IndexUnavailable says why a read-only open reads the database from its
// files alone (STATE_001: another process has it open for writing and
// holds its index; STATE_003: the index is not current, or not there, and
// only a writer's recovery would make it so), or nil when the index is in
// use. Reads that need the index return this error.
func (db *DB) IndexUnavailable() error {
	if db.ro == nil || db.ro.noIndex == nil {
		return nil
	}
	return db.ro.noIndex
}

// ReadOnly reports whether the database was opened with Options.ReadOnly.
func (db *DB) ReadOnly() bool { return db.ro != nil }

// filesOnly reports whether this is a read-only open without the index.
func (db *DB) filesOnly() bool { return db.ro != nil && db.ro.noIndex != nil }

// openReadOnly is Open with Options.ReadOnly (opts have their defaults).
func openReadOnly(dir string, opts Options) (*DB, error) {
	fs := opts.FS
	if err := isDatabaseDir(fs, dir); err != nil {
		return nil, err
	}
	lock, writer, err := readLockDir(fs, dir)
	if err != nil {
		return nil, err
	}
	if lock == nil {
		lock = closerFunc(func() error { return nil })
	}
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
		ro:              &readOnly{},
	}
	db.commit.init(db.commitEnv())
	db.files = newFileCache(fs, opts.FileCacheSize)
	db.adm = admission.New(admissionConfig(&opts))
	fail := func(err error) (*DB, error) {
		if db.index != nil {
			_ = db.closeIndex()
		}
		_ = db.files.close()
		_ = lock.Close()
		return nil, err
	}
	if db.id, err = readIDFile(fs, dir); err != nil {
		return fail(err)
	}
	if writer != "" {
		db.ro.why = fmt.Sprintf("database %s is open for writing by %s", dir, writer)
		db.ro.noIndex = errs.New(errs.CodeScopeLocked, "%s, which holds its index: %s", db.ro.why, filesWork)
	} else if db.ro.noIndex, err = db.openIndexReadOnly(); err != nil {
		return fail(err)
	}
	db.gate.serving = true
	return db, nil
}

// isDatabaseDir refuses (INPUT_001) a dir that holds no database: a
// read-only open creates none.
func isDatabaseDir(fs vfs.FS, dir string) error {
	st, err := fs.Stat(dir)
	switch {
	case err != nil && oserrorIsNotExist(err):
		return errs.New(errs.CodeInvalidInput, "no anchordb database at %s", dir)
	case err != nil:
		return errs.Wrap(errs.CodeWriteFailed, err, "stat %s", dir)
	case !st.IsDir():
		return errs.New(errs.CodeInvalidInput, "%s is not a directory", dir)
	}
	for _, name := range []string{IDFile, segment.AnchorsDir, IndexDir} {
		if _, err := fs.Stat(fs.PathJoin(dir, name)); err == nil {
			return nil
		}
	}
	return errs.New(errs.CodeInvalidInput, "no anchordb database at %s", dir)
}

// readIDFile reads the database id file; "" when there is none (an old
// database keeps it in the index only, and a read-only open writes none).
func readIDFile(fs vfs.FS, dir string) (string, error) {
	path := fs.PathJoin(dir, IDFile)
	f, err := fsutil.Open(fs, path, false)
	if err != nil {
		if oserrorIsNotExist(err) {
			return "", nil
		}
		if fsutil.IsEntryError(err) {
			return "", errs.New(errs.CodeInvalidInput, "database id file %s is malformed: %s", path, errs.Message(err)).At("", 0, path, 0)
		}
		return "", errs.Wrap(errs.CodeWriteFailed, err, "read %s", path).At("", 0, path, 0)
	}
	defer f.Close()
	buf := make([]byte, 64)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", errs.Wrap(errs.CodeWriteFailed, err, "read %s", path).At("", 0, path, 0)
	}
	id := strings.TrimSpace(string(buf[:n]))
	if len(id) != 32 || !isHex(id) {
		return "", errs.New(errs.CodeInvalidInput, "database id file %s is malformed", path)
	}
	return id, nil
}

// openIndexReadOnly opens the index read-only when it is current, and
// returns why it is not used otherwise (the index is then closed). Only a
// failure to read what says so is an error.
func (db *DB) openIndexReadOnly() (*errs.Error, error) {
	unusable := func(format string, args ...any) *errs.Error {
		if db.index != nil {
			_ = db.closeIndex()
			db.index = nil
		}
		db.ro.why = fmt.Sprintf(format, args...)
		return errs.New(errs.CodeDependencyMissing, "%s: %s", db.ro.why, filesWork)
	}
	if marked, cause := db.indexMarkedCorrupt(); marked {
		if errs.CodeOf(cause) == errs.CodeWriteFailed {
			return nil, cause
		}
		return unusable("the index of %s was found corrupt while the database ran (%s); the next open for writing rebuilds it", db.dir, errs.Message(cause)), nil
	}
	if _, err := db.fs.Stat(db.fs.PathJoin(db.dir, IndexDir)); err != nil {
		if !oserrorIsNotExist(err) {
			return nil, errs.Wrap(errs.CodeWriteFailed, err, "stat the index")
		}
		return unusable("database %s has no index; the next open for writing rebuilds it from the segments", db.dir), nil
	}
	if err := db.openIndex(); err != nil {
		return unusable("the index of %s does not open read-only (%s)", db.dir, errs.Message(err)), nil
	}
	format, fresh, err := db.metaUint(schema.MetaFormat)
	if err != nil {
		return unusable("the index of %s does not read (%s)", db.dir, errs.Message(err)), nil
	}
	switch {
	case fresh:
		return unusable("the index of %s is incomplete (a rebuild did not finish); the next open for writing rebuilds it", db.dir), nil
	case format != schema.Format:
		return unusable("the index of %s is of format %d, this version reads %d; rebuild-index makes a new one", db.dir, format, schema.Format), nil
	}
	clean, _, err := db.metaUint(schema.MetaClean)
	if err != nil {
		return unusable("the index of %s does not read (%s)", db.dir, errs.Message(err)), nil
	}
	if clean != 1 {
		return unusable("database %s was not closed cleanly (a crash, or a copy taken while it was open): its index may be behind the journal, "+
			"and only the recovery of an open for writing brings it up to date (open it once without --read-only, on a writable copy if need be)", db.dir), nil
	}
	if stale, err := db.indexIsStale(true); err != nil || stale {
		if err == nil {
			err = errs.New(errs.CodeIndexMismatch, "its settle point is older than the journal")
		}
		return unusable("the index of %s is not the one its last session closed (%s): an open for writing recovers it from the segments", db.dir, errs.Message(err)), nil
	}
	if db.id == "" {
		if v, ok, err := db.metaBytes(schema.MetaDBID); err != nil {
			return nil, err
		} else if ok && len(v) == 32 && isHex(string(v)) {
			db.id = string(v)
		}
	}
	if db.histFrom, err = loadHistoryFrom(db.index); err != nil {
		return unusable("the index of %s does not read (%s)", db.dir, errs.Message(err)), nil
	}
	clock, _, err := db.metaUint(schema.MetaClock)
	if err != nil {
		return unusable("the index of %s does not read (%s)", db.dir, errs.Message(err)), nil
	}
	db.clock.Store(clock)
	db.recovery.Clean = true
	if err := db.reportStoredDamage(); err != nil {
		return unusable("the index of %s does not read (%s)", db.dir, errs.Message(err)), nil
	}
	return nil, nil
}

// readOnlyPebble adjusts the index's options for a read-only open: Pebble
// writes nothing, through a filesystem that would refuse it anyway, and a
// corruption it meets is reported, not recorded.
func (db *DB) readOnlyPebble(po *pebble.Options) {
	po.ReadOnly = true
	po.FS = readOnlyFS{fs: db.fs}
	po.EventListener = &pebble.EventListener{
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			db.opts.Logger.Errorf("index corruption (a read-only open records nothing; the next open for writing finds it again): %s", info)
		},
	}
}

// beginFiles enters the read gate for a read from the files alone.
func (db *DB) beginFiles() error {
	if !db.reads.Enter() {
		return errClosed
	}
	return nil
}

// shutReadOnly is shut for a read-only open: nothing to settle or mark.
func (db *DB) shutReadOnly() error {
	db.adm.Drain()
	db.reads.Drain()
	var err error
	if db.index != nil {
		err = db.closeIndex()
	}
	return errors.Join(err, ioErr(db.files.close(), "close segments"))
}

// fileAnchorIDs lists the anchors the files hold: every anchor directory
// (its id read from the first segment or stub that names it) and every
// anchor the journal holds frames of. A directory none of whose files
// names an anchor is skipped: it holds no record yet (a first segment
// being created), or damage only a check with the index can place.
func (db *DB) fileAnchorIDs(ctx context.Context, jv *journalView) ([]string, error) {
	seen := map[string]bool{}
	root := db.fs.PathJoin(db.dir, segment.AnchorsDir)
	fans, err := fsutil.List(db.fs, root)
	if err != nil && !oserrorIsNotExist(err) && !fsutil.IsEntryError(err) {
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "list %s", root)
	}
	for _, fan := range fans {
		if len(fan) != 2 || !isHex(fan) {
			continue
		}
		subs, err := listTreeDir(db.fs, db.fs.PathJoin(root, fan))
		if fsutil.IsEntryError(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, sub := range subs {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if len(sub) != 30 || !isHex(sub) {
				continue
			}
			if id := db.anchorOfDir(db.fs.PathJoin(root, fan, sub)); id != "" && segment.AnchorPathID(id) == fan+sub {
				seen[id] = true
			}
		}
	}
	if jv != nil {
		for id := range jv.byAnchor {
			if segment.ValidateAnchorID(id) == nil {
				seen[id] = true
			}
		}
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// anchorOfDir returns the anchor id the files of an anchor directory name:
// the header of its first segment that parses, or its first stub that does.
func (db *DB) anchorOfDir(dir string) string {
	segs, err := listSegments(db, dir)
	if err != nil {
		return ""
	}
	for _, s := range segs {
		if s.stub {
			if data, err := readWholeFile(db.fs, s.path); err == nil {
				if st, err := segment.ParseStub(data); err == nil {
					return st.Anchor
				}
			}
			continue
		}
		if h, _, err := readSegmentHeader(db, s.path); err == nil {
			return h.Anchor
		}
	}
	return ""
}
