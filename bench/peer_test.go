package bench

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/anchordb/anchordb/bench/harness"
	"github.com/cockroachdb/pebble/v2"
)

// The peers: Pebble (github.com/cockroachdb/pebble/v2) doing each engine
// benchmark's work on the real filesystem, with the options of anchordb's
// own index (harness.IndexPebbleOptions: a user who tuned Pebble would run
// it so) and its WAL, which is its durability. BenchmarkPeerPebbleDefault*
// run Pebble's defaults, the second, labelled row. Pebble is also what the
// engine indexes with, so a ratio below 1 is the price of the engine's
// work on top of Pebble (hashing, the journal and segments, index rows, the
// Merkle tree).

// pebbleTuning names a Pebble configuration.
type pebbleTuning int

const (
	tunedPebble   pebbleTuning = iota // the index's options
	defaultPebble                     // Pebble's defaults
)

func (t pebbleTuning) options() *pebble.Options {
	if t == defaultPebble {
		return harness.DefaultPebbleOptions()
	}
	return harness.IndexPebbleOptions()
}

// openPebble opens a Pebble database in dir (a new temporary directory if
// empty) with a watch on its flushes and compactions, closed when tb ends.
func openPebble(tb testing.TB, dir string, t pebbleTuning) pebbleDB {
	tb.Helper()
	if dir == "" {
		dir = tb.TempDir()
	}
	opts := t.options()
	log := &quietLogger{}
	opts.Logger = log
	w := &harness.LSMWatch{}
	w.Install(opts)
	db, err := pebble.Open(dir, opts)
	if err != nil {
		tb.Fatalf("open pebble: %v", err)
	}
	tb.Cleanup(func() {
		if err := db.Close(); err != nil {
			tb.Errorf("close pebble: %v", err)
		}
		for _, e := range log.Errors() {
			tb.Errorf("pebble logged: %s", e)
		}
	})
	return pebbleDB{db, w}
}

// warmPebble is warmAnchors' counterpart: n records in one durable batch,
// then rest.
func warmPebble(tb testing.TB, db pebbleDB, n int) {
	tb.Helper()
	var buf kvBuf
	b := db.NewBatch()
	for i := 0; i < n; i++ {
		k, v := buf.kv(warmKey + uint64(i))
		_ = b.Set(k, v, nil)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		tb.Fatalf("warm pebble: %v", err)
	}
	_ = b.Close()
	if err := db.quiesce(context.Background()); err != nil {
		tb.Fatalf("warm pebble: %v", err)
	}
}

// peerSet: writers goroutines each Set one key at a time with opts
// (pebble.Sync or pebble.NoSync) — the peer of appendSync and appendNoSync,
// warmed as they are (warm records, anchors on the engine's side), with
// values of valueSize bytes; the clock stops at rest.
func peerSet(writers, warm, valueSize int, t pebbleTuning, opts *pebble.WriteOptions) workload {
	return func(tb testing.TB) body {
		db := openPebble(tb, "", t)
		warmPebble(tb, db, warm)
		keys := make([][KeySize]byte, writers)
		vals := make([][]byte, writers)
		for w := range vals {
			vals[w] = make([]byte, valueSize)
		}
		ctx := context.Background()
		return func(n int) (int64, error) {
			err := Parallel(n, writers, func(w, i int) error {
				return db.Set(Key(keys[w][:], uint64(i)), ValueN(vals[w], uint64(i), valueSize), opts)
			})
			if err != nil {
				return int64(n), err
			}
			return int64(n), db.quiesce(ctx)
		}
	}
}

// peerBatchSync: one goroutine commits batches of size Sets with
// pebble.Sync — the peer of appendBatchSync; the clock stops at rest.
func peerBatchSync(size int, t pebbleTuning) workload {
	return func(tb testing.TB) body {
		db := openPebble(tb, "", t)
		warmPebble(tb, db, 1)
		var buf kvBuf
		ctx := context.Background()
		return func(n int) (int64, error) {
			for op := 0; op < n; op++ {
				b := db.NewBatch()
				for j := 0; j < size; j++ {
					k, v := buf.kv(uint64(op*size + j))
					_ = b.Set(k, v, nil)
				}
				if err := b.Commit(pebble.Sync); err != nil {
					_ = b.Close()
					return int64(op * size), fmt.Errorf("batch %d: %w", op, err)
				}
				if err := b.Close(); err != nil {
					return int64(op * size), err
				}
			}
			return int64(n * size), db.quiesce(ctx)
		}
	}
}

// pebbleGetFixtures hold, per n, a closed Pebble database (the index's
// options) with keys 0..n-1, loaded in batches of loadBatch like the
// engine's fixture, flushed and compacted.
var pebbleGetFixtures onceBySize[string]

func buildPebbleGetFixture(n int) (string, error) {
	return keptFixture(fmt.Sprintf("pebble-get-%d", n), func(dir string) error {
		opts := harness.IndexPebbleOptions()
		db, err := pebble.Open(dir, opts)
		if err != nil {
			return err
		}
		var buf kvBuf
		for start := 0; start < n; start += loadBatch {
			b := db.NewBatch()
			for i := start; i < min(start+loadBatch, n); i++ {
				k, v := buf.kv(uint64(i))
				_ = b.Set(k, v, nil)
			}
			err := b.Commit(pebble.NoSync)
			_ = b.Close()
			if err != nil {
				_ = db.Close()
				return fmt.Errorf("load: %w", err)
			}
		}
		if err := db.Flush(); err != nil {
			_ = db.Close()
			return err
		}
		// Like the engine fixture: closed, compacted, reopened for each run.
		if err := db.Close(); err != nil {
			return err
		}
		return compactPebble(dir)
	})
}

// compactPebble compacts the whole key space of the closed Pebble database
// in dir (a read fixture: the peer's, or the engine's index) with the
// index's options, and closes it.
func compactPebble(dir string) error {
	db, err := pebble.Open(dir, harness.IndexPebbleOptions())
	if err != nil {
		return err
	}
	end := bytes.Repeat([]byte{0xFF}, 64) // above every key of either database
	if err := db.Compact(context.Background(), []byte{0}, end, true); err != nil {
		_ = db.Close()
		return fmt.Errorf("compact %s: %w", dir, err)
	}
	return db.Close()
}

// peerGet reads the keys of a Pebble database holding n keys in the same
// order as get, copying each value out as the engine's Get does.
func peerGet(n int, check bool) workload {
	return func(tb testing.TB) body {
		dir, err := pebbleGetFixtures.get(n, buildPebbleGetFixture)
		if err != nil {
			tb.Fatalf("load %d keys: %v", n, err)
		}
		db := openPebble(tb, dir, tunedPebble)
		order := NewOrder(n)
		var kb [KeySize]byte
		return func(ops int) (int64, error) {
			for op := 0; op < ops; op++ {
				i := order.At(op)
				v, closer, err := db.Get(Key(kb[:], i))
				if err != nil {
					return int64(op), fmt.Errorf("get key %d: %w", i, err)
				}
				value := append([]byte(nil), v...)
				_ = closer.Close()
				if check {
					if err := checkValue(value, i); err != nil {
						return int64(op), err
					}
				} else if len(value) != ValueSize {
					return int64(op), fmt.Errorf("get key %d: %d bytes", i, len(value))
				}
			}
			return int64(ops), nil
		}
	}
}

// BenchmarkPeerPebbleSync is the peer of AppendSync/writers=64/anchors=16:
// Pebble with the index's options.
func BenchmarkPeerPebbleSync(b *testing.B) {
	for _, w := range syncWriters {
		b.Run(fmt.Sprintf("writers=%d", w), func(b *testing.B) {
			run(b, peerSet(w, syncAnchors[0], ValueSize, tunedPebble, pebble.Sync))
		})
	}
}

// BenchmarkPeerPebbleDefaultSync is the same with Pebble's defaults.
func BenchmarkPeerPebbleDefaultSync(b *testing.B) {
	for _, w := range syncWriters {
		b.Run(fmt.Sprintf("writers=%d", w), func(b *testing.B) {
			run(b, peerSet(w, syncAnchors[0], ValueSize, defaultPebble, pebble.Sync))
		})
	}
}

func BenchmarkPeerPebbleBatchSync(b *testing.B) {
	for _, s := range batchSizes {
		b.Run(fmt.Sprintf("size=%d", s), func(b *testing.B) { run(b, peerBatchSync(s, tunedPebble)) })
	}
}

func BenchmarkPeerPebbleNoSync(b *testing.B) {
	for _, w := range noSyncWriters {
		b.Run(fmt.Sprintf("writers=%d", w), func(b *testing.B) {
			run(b, peerSet(w, noSyncAnchors, ValueSize, tunedPebble, pebble.NoSync))
		})
	}
}

func BenchmarkPeerPebbleGet(b *testing.B) { run(b, peerGet(getKeys(), false)) }
