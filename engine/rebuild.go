package engine

import (
	"context"
	"errors"
	"slices"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/anchordb/anchordb/internal/journal"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Rebuilding the index.
//
// The index is a projection of the segments, so a lost index is rebuilt by
// adopting every record on disk (reconcile.go). After compaction truncated a
// log, the removed segments' stubs carry what the index still needs of their
// records: hashes and counters, idempotency keys, and the whole records that
// were their key's newest version (so a delete below the cut stays a delete).

// Recovery event kinds of a rebuild.
const (
	// EventStateFromSnapshot: a rebuild from a snapshot took the state at
	// its frontier from the named snapshot.
	EventStateFromSnapshot = "state_from_snapshot"
	// EventSnapshotSkipped: a snapshot failed to verify (INT_003), or the
	// audit log does not vouch for it (STATE_003), and was not used.
	EventSnapshotSkipped = "snapshot_skipped"
	// EventFastRebuildAbandoned: a rebuild from a snapshot met something only
	// a full replay handles, and fell back to it.
	EventFastRebuildAbandoned = "fast_rebuild_abandoned"
)

func asErr(err error) *errs.Error {
	var e *errs.Error
	if errors.As(err, &e) {
		return e
	}
	return errs.Wrap(errs.CodeSnapshotCorrupted, err, "snapshot")
}

// RebuildPlan describes what RebuildIndex does or would do.
type RebuildPlan struct {
	Dir      string         `json:"dir"`
	Anchors  int            `json:"anchors"`
	Segments int            `json:"segments"`
	Stubs    int            `json:"stubs"`
	Bytes    int64          `json:"bytes"`
	Report   RecoveryReport `json:"report"`
	Applied  bool           `json:"applied"`
}

// RebuildIndex drops the index of the (closed) database in dir and rebuilds
// it from the segments. Without apply it only counts what a rebuild would
// read. With apply it takes the database's lock, removes the index (and an
// INDEX-CORRUPT marker) and rebuilds through an Open that keeps that lock
// throughout: a database open elsewhere is STATE_001 at the first step, and
// no other process can open it between the removal and the rebuild.
func RebuildIndex(ctx context.Context, dir string, opts Options, apply bool) (RebuildPlan, error) {
	return RebuildIndexWith(ctx, dir, opts, RebuildOptions{Apply: apply})
}

// RebuildOptions control RebuildIndexWith.
type RebuildOptions struct {
	// Apply rebuilds; without it the rebuild is only planned.
	Apply bool
	// FromSnapshot starts from the newest snapshot that the audit log
	// records as created (name, file and state hash) and that verifies:
	// the state at its frontier comes from it and the records up to it are indexed
	// without recomputing their hashes (see fastrebuild.go). Much faster on
	// a large log; history before the snapshot is not rebuilt. Anything
	// unusual on disk falls back to a full replay.
	FromSnapshot bool
}

// RebuildIndexWith is RebuildIndex with options: ro.FromSnapshot starts the
// rebuild at the newest snapshot the audit log records that verifies. The
// returned plan carries the recovery report of the rebuilding Open.
func RebuildIndexWith(ctx context.Context, dir string, opts Options, ro RebuildOptions) (RebuildPlan, error) {
	apply := ro.Apply
	plan := RebuildPlan{Dir: dir}
	o, err := opts.withDefaults()
	if err != nil {
		return plan, err
	}
	fs := o.FS
	if err := countSegments(fs, dir, &plan); err != nil {
		return plan, err
	}
	if !apply {
		return plan, nil
	}
	if o.ReadOnly {
		return plan, errs.Wrap(errs.CodeWriteFailed, ErrReadOnly, "rebuilding the index of %s writes it", dir)
	}
	lock, err := lockDir(fs, dir)
	if err != nil {
		return plan, err
	}
	// NB: the lock is held from here through the open that rebuilds: until
	// this review it was let go in between, and another process's Open
	// could take the database with no index, rebuild it its own way and
	// leave this rebuild to fail with STATE_001 after it had dropped the
	// index.
	err = fs.RemoveAll(fs.PathJoin(dir, IndexDir))
	if err == nil {
		// The index a corruption marker named is gone: this rebuild is
		// what the marker asked the next Open for.
		err = clearIndexCorrupt(fs, dir)
	}
	if err == nil && rebuildIndexRemoved != nil {
		rebuildIndexRemoved()
	}
	if err != nil {
		_ = lock.Close()
		return plan, errs.Wrap(errs.CodeWriteFailed, err, "remove the old index")
	}
	o.rebuildFromSnapshot = ro.FromSnapshot
	db, err := openLocked(dir, o, lock) // closes the lock when it fails
	if err != nil {
		return plan, err
	}
	plan.Report = db.RecoveryReport()
	plan.Applied = true
	return plan, db.Close()
}

// rebuildIndexRemoved, set by tests only, runs when RebuildIndexWith has
// removed the index, before it opens the database.
var rebuildIndexRemoved func()

// countSegments counts what a rebuild would read into plan. An entry a
// rebuild would have to list or read that is not a directory, or not a
// regular file (a FIFO, whose open blocks with no context to end it, a
// dangling link), refuses the rebuild with INT_002 before anything is
// changed: a rebuild adopts nothing of the anchor behind it, so the index
// would come back without records it has now.
func countSegments(fs vfs.FS, dir string, plan *RebuildPlan) error {
	refuse := func(err error) error {
		var ee *fsutil.EntryError
		if !errors.As(err, &ee) {
			return err
		}
		e := errs.New(errs.CodeChainBroken, "%s, where a rebuild must read: remove or replace it first; the index is left as it is", ee.Error())
		e.File = ee.Path
		return e
	}
	// Every journal file: with the index gone, no settle point says which
	// ones hold only what the segments already have.
	jdir := fs.PathJoin(dir, JournalDir)
	gens, err := journal.List(fs, jdir)
	if err != nil {
		return entryErr(refuse(err), errs.CodeChainBroken, "list "+jdir)
	}
	for _, g := range gens {
		p := fs.PathJoin(jdir, journal.FileName(g))
		if _, err := fsutil.Regular(fs, p, true); err != nil {
			return entryErr(refuse(err), errs.CodeChainBroken, "stat "+p)
		}
	}
	root := fs.PathJoin(dir, segment.AnchorsDir)
	fans, err := fsutil.List(fs, root)
	if err != nil {
		if oserrorIsNotExist(err) {
			return nil
		}
		return entryErr(refuse(err), errs.CodeChainBroken, "list "+root)
	}
	slices.Sort(fans)
	for _, fan := range fans {
		if len(fan) != 2 || !isHex(fan) {
			continue // never read
		}
		subs, err := listTreeDir(fs, fs.PathJoin(root, fan))
		if err != nil {
			return refuse(err)
		}
		slices.Sort(subs)
		for _, sub := range subs {
			if len(sub) != 30 || !isHex(sub) {
				continue
			}
			d := fs.PathJoin(root, fan, sub)
			names, err := listTreeDir(fs, d)
			if err != nil {
				return refuse(err)
			}
			plan.Anchors++
			for _, n := range names {
				_, seg := segment.ParseFileName(n)
				_, stub := segment.ParseStubFileName(n)
				if !seg && !stub {
					continue
				}
				st, err := fsutil.Regular(fs, fs.PathJoin(d, n), true)
				if err != nil {
					return entryErr(refuse(err), errs.CodeChainBroken, "stat "+fs.PathJoin(d, n))
				}
				if seg {
					plan.Segments++
					plan.Bytes += st.Size()
				} else {
					plan.Stubs++
				}
			}
		}
	}
	return nil
}
