package harness

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// The Pebble configurations the peers run with.
//
// A Pebble peer runs as a user who tuned it would run it: with the options
// anchordb's own index runs with. The engine builds them in
// engine.(*DB).openIndex (engine/index.go) and exports no function that
// returns them, so IndexPebbleOptions copies the values it sets there;
// TestIndexPebbleOptionsMatchEngine reads the engine's options through
// engine.Options.PebbleOptions and fails when the two drift apart. The peer
// keeps its write-ahead log (the engine's index has none because anchordb's
// journal is its log; the peer's WAL is its durability) and Pebble's own
// defaults for everything the engine leaves at Pebble's default.
//
// DefaultPebbleOptions is Pebble as it comes (pebble.Options{} with a quiet
// logger), kept as a second, labelled row.

// IndexCacheSize is the block cache of anchordb's index (64 MiB).
const IndexCacheSize = 64 << 20

// IndexPebbleOptions returns Pebble options with the tuning of anchordb's
// index: a 64 MiB block cache, 64 MiB memtables (at most 4 queued before
// writes stop), L0 compaction at 4 files and write stops at 24, and the
// newest on-disk format. The logger is quiet; the event listener is the
// caller's to set (Watch does).
func IndexPebbleOptions() *pebble.Options {
	return &pebble.Options{
		Logger:                      quietLogger{},
		CacheSize:                   IndexCacheSize,
		MemTableSize:                64 << 20,
		MemTableStopWritesThreshold: 4,
		L0CompactionThreshold:       4,
		L0StopWritesThreshold:       24,
		FormatMajorVersion:          pebble.FormatNewest,
	}
}

// DefaultPebbleOptions returns Pebble's defaults with a quiet logger.
func DefaultPebbleOptions() *pebble.Options {
	return &pebble.Options{Logger: quietLogger{}}
}

// LSMWatch counts the flushes and compactions an LSM (a Pebble peer, or
// anchordb's index through engine.Options.PebbleOptions) has in progress,
// from its event listener, so that a benchmark can stop its clock when the
// LSM is quiescent. The same watch serves both sides of a comparison, so
// both are held to the same rule.
type LSMWatch struct {
	inFlight atomic.Int64
	flushes  atomic.Int64
	compacts atomic.Int64
}

// Listener returns the listener to install (alone, or teed with another
// through pebble.TeeEventListener).
func (w *LSMWatch) Listener() pebble.EventListener {
	return pebble.EventListener{
		FlushBegin:      func(pebble.FlushInfo) { w.inFlight.Add(1) },
		FlushEnd:        func(pebble.FlushInfo) { w.inFlight.Add(-1); w.flushes.Add(1) },
		CompactionBegin: func(pebble.CompactionInfo) { w.inFlight.Add(1) },
		CompactionEnd:   func(pebble.CompactionInfo) { w.inFlight.Add(-1); w.compacts.Add(1) },
	}
}

// Install adds the watch's listener to o, keeping any listener o has (the
// engine's own: it syncs the journal before every index flush).
func (w *LSMWatch) Install(o *pebble.Options) {
	l := w.Listener()
	if o.EventListener != nil {
		l = pebble.TeeEventListener(*o.EventListener, l)
	}
	o.EventListener = &l
}

// Counts returns the flushes and compactions completed so far.
func (w *LSMWatch) Counts() (flushes, compactions int64) {
	return w.flushes.Load(), w.compacts.Load()
}

// QuietWindow is how long an LSM must have had no flush or compaction in
// progress to count as quiescent. Pebble schedules the next compaction as
// the previous one ends, so a gap this long means none is due.
const QuietWindow = 25 * time.Millisecond

// MaxQuiesce bounds a wait for rest: an LSM still compacting after it has
// something wrong with it, and a benchmark should say so, not hang.
const MaxQuiesce = 30 * time.Minute

// Quiesce waits until no flush or compaction has been in progress for
// QuietWindow, or ctx ends, or MaxQuiesce passes (an error).
func (w *LSMWatch) Quiesce(ctx context.Context) error {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	deadline := time.Now().Add(MaxQuiesce)
	var quietSince time.Time
	for {
		if time.Now().After(deadline) {
			return fmt.Errorf("not at rest after %v: %d flushes or compactions in progress", MaxQuiesce, w.inFlight.Load())
		}
		if w.inFlight.Load() > 0 {
			quietSince = time.Time{}
		} else if quietSince.IsZero() {
			quietSince = time.Now()
		} else if time.Since(quietSince) >= QuietWindow {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
