package engine

import (
	"errors"
	"slices"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2"
)

// Settling.
//
// Appends are made durable by Pebble's WAL: each frame rides in a journal row
// ('j') of the same batch as its index rows, and segment files are written
// but not fsynced. Settling makes the segments durable on their own and drops
// the journal rows behind them:
//
//  1. the commit leader captures the set of segment files and directories
//     written since the last settle, and the last LSN they hold (a settle mark
//     rides through group commit, so it sees every group before it);
//  2. the settler fsyncs those files and directories;
//  3. it deletes the journal rows up to that LSN.
//
// A crash anywhere in between leaves journal rows whose frames are already in
// the segments; recovery rewrites nothing it finds intact. 1,000 anchors
// written in one settle interval cost 1,000 fsyncs once per interval, never
// per commit.

type settleMark struct {
	upTo  uint64 // journal rows with lsn <= upTo are in the captured files
	files []string
	dirs  []string
}

// captureSettle runs in the commit leader.
func (db *DB) captureSettle(m *settleMark) {
	m.upTo = db.nextLSN - 1
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
	db.journalBytes = 0
}

// settle makes every segment written so far durable and trims the journal.
func (db *DB) settle() error {
	db.settleMu.Lock()
	defer db.settleMu.Unlock()
	if err := db.writable(); err != nil && !errors.Is(err, errClosed) {
		return err
	}
	req := newRequest()
	req.settle = &settleMark{}
	db.submit(req)
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
	return db.trimJournal(m.upTo)
}

// syncPaths fsyncs files, then directories (so a directory entry never
// points at a file whose data is not yet durable).
func (db *DB) syncPaths(files, dirs []string) error {
	slices.Sort(files)
	for _, p := range files {
		f, err := db.fs.Open(p)
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

// trimJournal deletes journal rows up to and including upTo. It need not be
// durable: rows that survive a crash are found intact and dropped next time.
func (db *DB) trimJournal(upTo uint64) error {
	if upTo == 0 {
		return nil
	}
	b := db.index.NewBatch()
	defer b.Close()
	_ = b.DeleteRange(journalKey(0), journalKey(upTo+1), nil)
	_ = b.Set(metaKey(metaSettled), be.AppendUint64(nil, upTo), nil)
	if err := db.applyBatch(b, false); err != nil {
		return db.fail(err)
	}
	return nil
}

// maybeSettle wakes the settler when the journal has grown past its bound.
// It runs in the commit leader.
func (db *DB) maybeSettle() {
	if db.journalBytes >= db.opts.SettleBytes {
		select {
		case db.settleCh <- struct{}{}:
		default:
		}
	}
}

// Sync makes every acknowledged append durable in its segment file and trims
// the journal — what Close does, without closing. Appends made with NoSync
// are durable once Sync returns.
func (db *DB) Sync() error {
	if err := db.writable(); err != nil {
		return err
	}
	if err := db.settle(); err != nil {
		return err
	}
	if err := db.index.LogData(nil, pebble.Sync); err != nil {
		return db.fail(errs.Wrap(errs.CodeWriteFailed, err, "index WAL sync"))
	}
	return nil
}
