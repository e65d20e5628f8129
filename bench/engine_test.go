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
// peer_test.go.

// openEngine opens a database in dir (a new temporary directory if empty),
// closed when tb ends — after the timer has stopped.
func openEngine(tb testing.TB, dir string, opts engine.Options) *engine.DB {
	tb.Helper()
	if dir == "" {
		dir = tb.TempDir()
	}
	db, err := engine.Open(dir, opts)
	if err != nil {
		tb.Fatalf("open engine: %v", err)
	}
	tb.Cleanup(func() {
		if err := db.Close(); err != nil {
			tb.Errorf("close engine: %v", err)
		}
	})
	return db
}

// warmKey is far above any benchmark index, so warm-up records never share a
// key with measured ones.
const warmKey = 1 << 48

// warmAnchors appends one record to each anchor (one durable batch), so the
// measured appends find every anchor's directory and segment file in place:
// the benchmarks measure the steady state, not anchor creation.
func warmAnchors(tb testing.TB, db *engine.DB, anchors []string) {
	tb.Helper()
	var buf kvBuf
	entries := make([]engine.Entry, len(anchors))
	for i, a := range anchors {
		k, v := buf.kv(warmKey + uint64(i))
		entries[i] = engine.Entry{Anchor: a, Type: segment.TypePut,
			Key: append([]byte(nil), k...), Value: append([]byte(nil), v...)}
	}
	if _, err := db.AppendBatch(context.Background(), entries); err != nil {
		tb.Fatalf("warm anchors: %v", err)
	}
	// Segment bytes are buffered: settle so the directories and files exist
	// before the timer starts.
	if err := db.Sync(context.Background()); err != nil {
		tb.Fatalf("warm anchors: sync: %v", err)
	}
}

// appendSync: writers goroutines each Put one record at a time with the
// default (sync) durability; record i goes to anchor i mod anchors, so every
// commit group spans many anchors.
func appendSync(writers, anchors int) workload {
	return appendPuts(writers, anchors, engine.Options{})
}

// appendNoSync: like appendSync with NoSync set on the database: an append
// returns once its frame has reached the OS.
func appendNoSync(writers, anchors int) workload {
	return appendPuts(writers, anchors, engine.Options{NoSync: true})
}

// appendPuts is the body of appendSync and appendNoSync, on a database opened
// with opts.
func appendPuts(writers, anchors int, opts engine.Options) workload {
	return func(tb testing.TB) body {
		db := openEngine(tb, "", opts)
		ids := AnchorIDs(anchors)
		warmAnchors(tb, db, ids)
		bufs := make([]kvBuf, writers)
		ctx := context.Background()
		return func(n int) (int64, error) {
			err := Parallel(n, writers, func(w, i int) error {
				k, v := bufs[w].kv(uint64(i))
				_, err := db.Put(ctx, ids[i%anchors], k, v)
				return err
			})
			return int64(n), err
		}
	}
}

// batchAnchor is the one anchor every AppendBatch benchmark batch goes to.
const batchAnchor = "batch-anchor"

// appendBatchSync: one goroutine appends batches of size puts, all to one
// anchor, each batch durable (sync) before the next starts. An operation is
// one batch; records/s counts records.
func appendBatchSync(size int) workload { return appendBatches(size, engine.Options{}) }

// appendBatches is the body of appendBatchSync on a database opened with opts.
func appendBatches(size int, opts engine.Options) workload {
	return func(tb testing.TB) body {
		db := openEngine(tb, "", opts)
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
			return int64(n * size), nil
		}
	}
}

// getAnchors is how many anchors the read fixture's records are spread over.
const getAnchors = 16

// loadBatch is the batch size used to load the read fixtures.
const loadBatch = 1000

// engineGetFixture is a directory holding a closed engine database with keys
// 0..n-1 (one put each, spread round-robin over getAnchors anchors in
// batches of loadBatch), built once per process per n.
var engineGetFixtures onceBySize[string]

func buildEngineGetFixture(n int) (string, error) {
	dir, err := fixtureDir("engine-get")
	if err != nil {
		return "", err
	}
	db, err := engine.Open(dir, engine.Options{NoSync: true})
	if err != nil {
		return "", err
	}
	ids := AnchorIDs(getAnchors)
	ctx := context.Background()
	entries := make([]engine.Entry, 0, loadBatch)
	bufs := make([]kvBuf, loadBatch)
	for start, batch := 0, 0; start < n; start, batch = start+loadBatch, batch+1 {
		entries = entries[:0]
		for i := start; i < min(start+loadBatch, n); i++ {
			k, v := bufs[i-start].kv(uint64(i))
			entries = append(entries, engine.Entry{Anchor: ids[batch%getAnchors], Type: segment.TypePut, Key: k, Value: v})
		}
		if _, err := db.AppendBatch(ctx, entries); err != nil {
			_ = db.Close()
			return "", fmt.Errorf("load batch %d: %w", batch, err)
		}
	}
	// Close settles: every segment synced, the journal trimmed. Then the
	// index is compacted, as the peer's database is, so Get measures reads of
	// a settled LSM rather than racing the compactions the load left behind.
	if err := db.Close(); err != nil {
		return "", err
	}
	return dir, compactPebble(filepath.Join(dir, engine.IndexDir))
}

// get reads keys in the fixed order of NewOrder(n) from an engine database
// holding n keys: one Get per operation, from one goroutine. The database is
// loaded once per process (engineGetFixtures) and opened for each run.
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
	getKeys       = 1_000_000
)

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
	return appendPuts(writers, anchors, engine.Options{DisableAdmission: true})
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

func BenchmarkGet(b *testing.B) { run(b, get(getKeys, false)) }
