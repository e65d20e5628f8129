package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/segment"
)

// The engine benchmarks. Each opens a fresh database with default options on
// the real filesystem (b.TempDir) unless it says otherwise; its peer is in
// peer_test.go. Run them with a fixed -benchtime Nx (bench/ratios.sh does):
// a time-based -benchtime gives the faster side more records, and an LSM's
// cost per record grows with what it holds.

// openEngine opens a database in dir (a new temporary directory if empty),
// closed when tb ends — after the timer has stopped.
func openEngine(tb testing.TB, dir string, opts engine.Options) *engine.DB {
	return openWatched(tb, dir, opts).DB
}

// warmKey is far above any benchmark index, so warm-up records never share a
// key with measured ones.
const warmKey = 1 << 48

// warmAnchors appends one record to each anchor (one durable batch) and
// brings the database to rest, so the measured appends find every anchor's
// directory and segment file in place and the index's first table written:
// the benchmarks measure the steady state, not anchor creation. The Pebble
// peers get the same warm-up (warmPebble): as many records, one durable
// batch, then rest.
func warmAnchors(tb testing.TB, db engineDB, anchors []string) {
	tb.Helper()
	var buf kvBuf
	entries := make([]engine.Entry, len(anchors))
	for i, a := range anchors {
		k, v := buf.kv(warmKey + uint64(i))
		entries[i] = engine.Entry{Anchor: a, Type: segment.TypePut,
			Key: append([]byte(nil), k...), Value: append([]byte(nil), v...)}
	}
	ctx := context.Background()
	if _, err := db.AppendBatch(ctx, entries); err != nil {
		tb.Fatalf("warm anchors: %v", err)
	}
	if err := db.quiesce(ctx); err != nil {
		tb.Fatalf("warm anchors: settle: %v", err)
	}
}

// appendSync: writers goroutines each Put one record at a time with the
// default (sync) durability; record i goes to anchor i mod anchors, so every
// commit group spans many anchors.
func appendSync(writers, anchors int) workload {
	return appendPuts(writers, anchors, ValueSize, engine.Options{})
}

// appendNoSync: like appendSync with NoSync set on the database: an append
// returns once its frame has reached the OS.
func appendNoSync(writers, anchors int) workload {
	return appendPuts(writers, anchors, ValueSize, engine.Options{NoSync: true})
}

// appendPuts is the body of appendSync and appendNoSync, with values of
// valueSize bytes, on a database opened with opts. The clock stops when
// the database is at rest (quiesce).
func appendPuts(writers, anchors, valueSize int, opts engine.Options) workload {
	return func(tb testing.TB) body {
		db := openWatched(tb, "", opts)
		ids := AnchorIDs(anchors)
		warmAnchors(tb, db, ids)
		keys := make([][KeySize]byte, writers)
		vals := make([][]byte, writers)
		for w := range vals {
			vals[w] = make([]byte, valueSize)
		}
		ctx := context.Background()
		return func(n int) (int64, error) {
			err := Parallel(n, writers, func(w, i int) error {
				_, err := db.Put(ctx, ids[i%anchors], Key(keys[w][:], uint64(i)), ValueN(vals[w], uint64(i), valueSize))
				return err
			})
			if err != nil {
				return int64(n), err
			}
			return int64(n), db.quiesce(ctx)
		}
	}
}

// batchAnchor is the one anchor every AppendBatch benchmark batch goes to.
const batchAnchor = "batch-anchor"

// appendBatchSync: one goroutine appends batches of size puts, all to one
// anchor, each batch durable (sync) before the next starts. An operation is
// one batch; records/s counts records.
func appendBatchSync(size int) workload { return appendBatches(size, engine.Options{}) }

// appendBatches is the body of appendBatchSync on a database opened with
// opts; the clock stops at rest.
func appendBatches(size int, opts engine.Options) workload {
	return func(tb testing.TB) body {
		db := openWatched(tb, "", opts)
		warmAnchors(tb, db, []string{batchAnchor})
		entries := make([]engine.Entry, size)
		bufs := make([]kvBuf, size)
		ctx := context.Background()
		return func(n int) (int64, error) {
			for op := 0; op < n; op++ {
				for j := range entries {
					k, v := bufs[j].kv(uint64(op*size + j))
					entries[j] = engine.Entry{Anchor: batchAnchor, Type: segment.TypePut, Key: k, Value: v}
				}
				if _, err := db.AppendBatch(ctx, entries); err != nil {
					return int64(op * size), fmt.Errorf("batch %d: %w", op, err)
				}
			}
			return int64(n * size), db.quiesce(ctx)
		}
	}
}

// getAnchors is how many anchors the read fixture's records are spread over.
const getAnchors = 16

// loadBatch is the batch size used to load the read fixtures.
const loadBatch = 1000

// engineGetFixtures hold, per n, a closed engine database with keys
// 0..n-1 (one put each, spread round-robin over getAnchors anchors in
// batches of loadBatch), settled and its index compacted.
var engineGetFixtures onceBySize[string]

func buildEngineGetFixture(n int) (string, error) {
	return keptFixture(fmt.Sprintf("engine-get-%d", n), func(dir string) error {
		return loadEngine(dir, n, getAnchors)
	})
}

// loadEngine fills dir with a closed database holding keys 0..n-1, one put
// each, in batches of loadBatch over anchors anchors (round-robin), then
// compacts its index, as the Pebble fixture is compacted, so reads meet a
// settled LSM rather than the compactions the load left behind.
func loadEngine(dir string, n, anchors int) error {
	db, err := engine.Open(dir, engine.Options{NoSync: true})
	if err != nil {
		return err
	}
	ids := AnchorIDs(anchors)
	ctx := context.Background()
	entries := make([]engine.Entry, 0, loadBatch)
	bufs := make([]kvBuf, loadBatch)
	for start, batch := 0, 0; start < n; start, batch = start+loadBatch, batch+1 {
		entries = entries[:0]
		for i := start; i < min(start+loadBatch, n); i++ {
			k, v := bufs[i-start].kv(uint64(i))
			entries = append(entries, engine.Entry{Anchor: ids[batch%anchors], Type: segment.TypePut, Key: k, Value: v})
		}
		if _, err := db.AppendBatch(ctx, entries); err != nil {
			_ = db.Close()
			return fmt.Errorf("load batch %d: %w", batch, err)
		}
	}
	// Close settles: every segment synced, the journal trimmed.
	if err := db.Close(); err != nil {
		return err
	}
	return compactPebble(filepath.Join(dir, engine.IndexDir))
}

// get reads keys in the fixed order of NewOrder(n) from an engine database
// holding n keys: one Get per operation, from one goroutine. The database is
// loaded once (engineGetFixtures) and opened for each run.
func get(n int, check bool) workload {
	return func(tb testing.TB) body {
		dir, err := engineGetFixtures.get(n, buildEngineGetFixture)
		if err != nil {
			tb.Fatalf("load %d keys: %v", n, err)
		}
		db := openEngine(tb, dir, engine.Options{})
		order := NewOrder(n)
		ctx := context.Background()
		var kb [KeySize]byte
		return func(ops int) (int64, error) {
			for op := 0; op < ops; op++ {
				i := order.At(op)
				v, err := db.Get(ctx, Key(kb[:], i))
				if err != nil {
					return int64(op), fmt.Errorf("get key %d: %w", i, err)
				}
				if check {
					if err := checkValue(v.Value, i); err != nil {
						return int64(op), err
					}
				} else if len(v.Value) != ValueSize {
					return int64(op), fmt.Errorf("get key %d: %d bytes", i, len(v.Value))
				}
			}
			return int64(ops), nil
		}
	}
}

// The benchmark shapes. The names are what ratios.sh and docs/PERFORMANCE.md
// refer to; change them together.
var (
	syncWriters   = []int{64}
	syncAnchors   = []int{16, 1000}
	batchSizes    = []int{1000}
	noSyncWriters = []int{1}
	noSyncAnchors = 16
)

// getKeys is the size of the read fixtures (1,000,000).
func getKeys() int { return sized(1_000_000, 20_000) }

func BenchmarkAppendSync(b *testing.B) {
	for _, w := range syncWriters {
		b.Run(fmt.Sprintf("writers=%d", w), func(b *testing.B) {
			for _, a := range syncAnchors {
				b.Run(fmt.Sprintf("anchors=%d", a), func(b *testing.B) { run(b, appendSync(w, a)) })
			}
		})
	}
}

// BenchmarkAppendSyncNoAdmission is AppendSync with the admission layer
// switched off (engine.Options.DisableAdmission): the pair measures what the
// in-flight bounds, the duplicate fast path and their bookkeeping cost.
func BenchmarkAppendSyncNoAdmission(b *testing.B) {
	b.Run("writers=64", func(b *testing.B) {
		b.Run("anchors=16", func(b *testing.B) { run(b, appendSyncNoAdmission(64, 16)) })
	})
}

func appendSyncNoAdmission(writers, anchors int) workload {
	return appendPuts(writers, anchors, ValueSize, engine.Options{DisableAdmission: true})
}

func BenchmarkAppendBatchSync(b *testing.B) {
	for _, s := range batchSizes {
		b.Run(fmt.Sprintf("size=%d", s), func(b *testing.B) { run(b, appendBatchSync(s)) })
	}
}

func BenchmarkAppendNoSync(b *testing.B) {
	for _, w := range noSyncWriters {
		b.Run(fmt.Sprintf("writers=%d", w), func(b *testing.B) { run(b, appendNoSync(w, noSyncAnchors)) })
	}
}

func BenchmarkGet(b *testing.B) { run(b, get(getKeys(), false)) }
