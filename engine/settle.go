package engine

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/journal"
)

// Settling.
//
// An acknowledged append is durable in the journal; its segment bytes and
// index rows are written but not fsynced. Settling makes them durable on
// their own so the journal behind them can be dropped:
//
//  1. a settle mark rides through group commit: the leader starts a new
//     journal file (the settle point), and the applier, having applied every
//     group before the mark, captures the segment files and directories
//     written since the last settle;
//  2. the settler fsyncs those files, then directories;
//  3. it records the settle point in the index and flushes the index (which
//     has no WAL: a flush is what makes its rows durable);
//  4. it deletes the journal files before the settle point.
//
// A crash anywhere in between leaves journal files whose frames are already
// in the segments; recovery rewrites nothing it finds intact. 1,000 anchors
// written in one settle interval cost 1,000 fsyncs once per interval, never
// per commit.

type settleMark struct {
	at    journal.Pos // the settle point: the start of the new journal file
	files []string
	dirs  []string
}

// rotateForSettle runs in the leader for a group carrying settle marks.
func (db *DB) rotateForSettle(g *group) error {
	pos, err := db.journal.Rotate()
	if err != nil && isFDPressure(err) {
		// Nothing is written until the new file exists: try again.
		err = db.waitDescriptor(func() (err error) {
			pos, err = db.journal.Rotate()
			return err
		})
	}
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "rotate journal")
	}
	for _, m := range g.marks {
		m.at = pos
	}
	db.journalBytes = 0
	return nil
}

// captureSettle runs in the applier, after every group before the mark has
// buffered its segment bytes: it writes the buffers out and captures what the
// settler must fsync.
func (db *DB) captureSettle(m *settleMark) error {
	if err := db.flushAllBuffers(); err != nil {
		return err
	}
	db.dirtyMu.Lock()
	for f := range db.dirtyFiles {
		m.files = append(m.files, f)
	}
	for d := range db.dirtyDirs {
		m.dirs = append(m.dirs, d)
	}
	clear(db.dirtyFiles)
	clear(db.dirtyDirs)
	db.dirtyMu.Unlock()
	return nil
}

// settle makes every segment written so far durable, flushes the index and
// drops the journal behind them.
func (db *DB) settle() error {
	db.settleMu.Lock()
	defer db.settleMu.Unlock()
	if err := db.writable(); err != nil && !errors.Is(err, errClosed) {
		return err
	}
	req := newRequest()
	req.settle = &settleMark{}
	db.commit.commit(req)
	m, err := req.settle, req.err
	freeRequest(req)
	if err != nil {
		return err
	}
	if err := db.syncPaths(m.files, m.dirs); err != nil {
		// The captured paths are lost to later settles, but the journal still
		// holds their frames and writes have stopped: recovery covers them.
		return db.fail(err)
	}
	// Our fsyncs succeeding does not make the files durable if a write or
	// fsync of one of them failed before them: the kernel may have dropped
	// those pages and reports that once, to the failed call (fsyncgate).
	// Every such failure stops the database before it releases segIO, so
	// waiting for segIO here sees it; one that begins after ours ended
	// loses only pages written after the settle point, which the journal
	// keeps.
	db.segIO.Lock()
	failed := db.failed.Load()
	db.segIO.Unlock()
	if failed != nil {
		return failed
	}
	if err := db.recordSettled(m.at); err != nil {
		return err
	}
	db.metrics.settles.Add(1)
	return nil
}

// recordSettled makes the index durable with the settle point in it, then
// removes the journal files before the point.
//
// The Lamport clock is recorded here too, not per commit: after a crash,
// recovery visits every anchor and takes the clock past their last counters.
func (db *DB) recordSettled(at journal.Pos) error {
	b := db.index.NewBatch()
	_ = b.Set(schema.MetaKey(schema.MetaSettled), at.AppendBinary(nil), nil)
	_ = b.Set(schema.MetaKey(schema.MetaClock), be.AppendUint64(nil, db.clock.Load()), nil)
	err := db.applyBatch(b)
	_ = b.Close()
	if err != nil {
		return db.fail(errs.Wrap(errs.CodeWriteFailed, err, "record settle point"))
	}
	if err := db.flushIndex(); err != nil {
		return db.fail(err)
	}
	if err := journal.RemoveBefore(db.fs, db.journalDir(), at.Gen); err != nil {
		return db.fail(errs.Wrap(errs.CodeWriteFailed, err, "remove settled journal files"))
	}
	return nil
}

// flushIndex writes the index's memtable to disk: with no WAL, that is what
// makes index rows durable.
func (db *DB) flushIndex() (err error) {
	defer func() {
		if r := recover(); r != nil {
			pf, ok := r.(pebbleFatal)
			if !ok {
				panic(r)
			}
			err = errs.New(errs.CodeWriteFailed, "flush index: %s", string(pf))
		}
	}()
	if err := db.index.Flush(); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "flush index")
	}
	return nil
}

// syncPaths fsyncs files, then directories (so a directory entry never
// points at a file whose data is not yet durable).
func (db *DB) syncPaths(files, dirs []string) error {
	slices.Sort(files)
	for _, p := range files {
		f, err := db.fs.Open(p)
		if err != nil && isFDPressure(err) {
			err = db.waitDescriptor(func() (err error) {
				f, err = db.fs.Open(p)
				return err
			})
		}
		if err != nil {
			if oserrorIsNotExist(err) {
				continue // rewritten or removed since; its replacement was synced
			}
			return errs.Wrap(errs.CodeWriteFailed, err, "open %s to sync", p)
		}
		err = f.Sync()
		_ = f.Close()
		if err != nil {
			return errs.Wrap(errs.CodeWriteFailed, err, "fsync %s", p)
		}
	}
	// Deepest first: an anchor directory before its fan-out directory.
	slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
	for _, d := range dirs {
		if err := db.syncDir(d); err != nil {
			return err
		}
	}
	return nil
}

func (db *DB) syncDir(d string) error {
	f, err := db.fs.OpenDir(d)
	if err != nil && isFDPressure(err) {
		err = db.waitDescriptor(func() (err error) {
			f, err = db.fs.OpenDir(d)
			return err
		})
	}
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "open directory %s to sync", d)
	}
	err = f.Sync()
	_ = f.Close()
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "fsync directory %s", d)
	}
	return nil
}

// Sync makes every acknowledged append durable in its segment file and in
// the index — what Close does, without closing. Appends made with NoSync are
// durable once Sync returns. ctx is looked at before the settle begins; a
// settle under way is not abandoned, since the fsyncs it has started cannot
// be.
func (db *DB) Sync(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := db.writable(); err != nil {
		return err
	}
	// The settle goes through group commit: Close must not stop the
	// applier under it (it would wait for ever), so it holds Close off as
	// an append does.
	if err := db.adm.Enter(); err != nil {
		return err
	}
	defer db.adm.LeaveGate()
	return db.settle()
}

// settleLoop settles when the journal grows past SettleBytes or
// SettleInterval passes with writes outstanding.
func (db *DB) settleLoop() {
	defer db.settler.Done()
	t := time.NewTicker(db.opts.SettleInterval)
	defer t.Stop()
	for {
		select {
		case <-db.stopBg:
			return
		case <-db.settleCh:
		case <-t.C:
		}
		if err := db.settle(); err != nil && !errors.Is(err, errClosed) {
			db.opts.Logger.Errorf("settle: %v", err)
		}
	}
}
