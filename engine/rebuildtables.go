package engine

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The sorted tables a rebuild from a snapshot writes and then ingests into
// Pebble in one step, never through its memtable (fastrebuild.go).

// tableWriter writes sorted rows of one table to sstables of up to 64 MiB.
type tableWriter struct {
	db    *DB
	dir   string
	name  string
	w     *sstable.Writer
	paths []string
	size  int
	done  *finisher
}

// finisher closes finished sstables in the background: closing one syncs
// it, and the rebuild has rows to produce meanwhile. Every table must be
// closed (and so durable) before it is ingested.
type finisher struct {
	wg  sync.WaitGroup
	mu  sync.Mutex
	err error
}

func (f *finisher) close(w *sstable.Writer) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		if err := w.Close(); err != nil {
			f.mu.Lock()
			f.err = errors.Join(f.err, errs.Wrap(errs.CodeWriteFailed, err, "finish rebuilt index table"))
			f.mu.Unlock()
		}
	}()
}

// wait returns once every table handed to close is closed.
func (f *finisher) wait() error {
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (t *tableWriter) set(k, v []byte) error {
	if t.w == nil {
		path := t.db.fs.PathJoin(t.dir, fmt.Sprintf("%s-%04d.sst", t.name, len(t.paths)))
		f, err := t.db.fs.Create(path, vfs.WriteCategoryUnspecified)
		if err != nil {
			return errs.Wrap(errs.CodeWriteFailed, err, "create %s", path)
		}
		// Written back as it grows, as Pebble does its own tables, so the
		// sync on close does not wait for the whole file.
		f = vfs.NewSyncingFile(f, vfs.SyncingFileOptions{BytesPerSync: 1 << 20})
		po := t.db.pebbleOpts
		wo := po.MakeWriterOptions(0, t.db.index.TableFormat())
		// Uncompressed: the rebuild's tables are written once and rewritten
		// by Pebble's compactions later; compressing them here would put
		// snappy on the rebuild's critical path.
		wo.Compression = sstable.NoCompression
		t.w = sstable.NewWriter(objstorageprovider.NewFileWritable(f), wo)
		t.paths = append(t.paths, path)
		t.size = 0
	}
	if err := t.w.Set(k, v); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "write rebuilt index table")
	}
	t.size += len(k) + len(v)
	if t.size >= 64<<20 {
		t.finish()
	}
	return nil
}

// finish hands the open sstable, if any, to the finisher, which reports
// its errors.
func (t *tableWriter) finish() {
	if t.w != nil {
		t.done.close(t.w)
		t.w = nil
	}
}

type kv struct{ k, v []byte }

// The tail's versions (records after the frontier) go to Pebble as sorted
// runs of about tailRunBytes, each written as a table and ingested after the
// snapshot's tables. They overlap the k table, so they cannot be ingested
// with it (one ingestion's tables must not overlap); Pebble puts each run in
// L0, above the k table at the bottom, so only the tail is ever compacted
// down. Going through the memtable instead overlapped every ingested table,
// put them all in L0 and made Close wait for their compaction. A variable so
// tests can make many runs.
var tailRunBytes = 16 << 20

// tailRuns collects the tail's k rows and writes them out in sorted runs.
type tailRuns struct {
	db    *DB
	dir   string
	rows  []kv
	bytes int
	runs  [][]string // each run's table paths, ingested one run at a time
	done  *finisher
}

func (t *tailRuns) add(row kv) error {
	t.rows = append(t.rows, row)
	t.bytes += len(row.k) + len(row.v)
	if t.bytes >= tailRunBytes {
		return t.flush()
	}
	return nil
}

func (t *tailRuns) flush() error {
	if len(t.rows) == 0 {
		return nil
	}
	slices.SortFunc(t.rows, func(a, b kv) int { return bytes.Compare(a.k, b.k) })
	w := &tableWriter{db: t.db, dir: t.dir, name: fmt.Sprintf("t%04d", len(t.runs)), done: t.done}
	for _, row := range t.rows {
		if err := w.set(row.k, row.v); err != nil {
			w.finish() // closed, not left open, before tmp goes
			return err
		}
	}
	w.finish()
	t.runs = append(t.runs, w.paths)
	clear(t.rows)
	t.rows, t.bytes = t.rows[:0], 0
	return nil
}
