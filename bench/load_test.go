package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
)

// Reads under write load: Get latency (p50, p99, p99.9) of one reader while
// 64 writers append durably as fast as they can, against Pebble (the
// index's options) under the same write load. Each side first loads
// loadKeys keys in durable batches and comes to rest; then the writers
// start (new keys, anchors round-robin over 16 on the engine's side), and
// once every writer has written, the clock runs over b.N Gets of the loaded
// keys in a fixed random order. The writers stop when the reads are done.
// Besides the percentiles each side reports the Gets/s and the writes/s the
// writers reached meanwhile: the latencies are under each side's own write
// rate.

// loadWriters is the write load's writers.
const loadWriters = 64

// loadKeys is the keys loaded before the reads.
func loadKeys() int { return sized(100_000, 5_000) }

// store is what the reads-under-load benchmark needs of either side.
type store interface {
	put(ctx context.Context, anchor int, key, value []byte) error
	get(key []byte) ([]byte, error)
}

// underLoad loads a store, starts the writers, and returns a body whose ops
// are Gets; the body reports its percentiles through report.
func underLoad(tb testing.TB, s store, n int, report func(name string, v float64)) body {
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	var kb [KeySize]byte
	var vb [ValueSize]byte
	var written atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, loadWriters)
	started := make(chan struct{})
	var startOnce sync.Once
	var inStart atomic.Int64
	for w := 0; w < loadWriters; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var b kvBuf
			first := true
			for i := uint64(w); ctx.Err() == nil; i += loadWriters {
				k, v := b.kv(warmKey/4 + i)
				if err := s.put(ctx, int(i%16), k, v); err != nil {
					if ctx.Err() == nil {
						errc <- err
					}
					return
				}
				written.Add(1)
				if first {
					first = false
					if inStart.Add(1) == loadWriters {
						startOnce.Do(func() { close(started) })
					}
				}
			}
		}(w)
	}
	tb.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	select {
	case <-started:
	case err := <-errc:
		tb.Fatalf("writers: %v", err)
	}
	order := NewOrder(n)
	return func(ops int) (int64, error) {
		lat := make([]time.Duration, ops)
		w0, t0 := written.Load(), time.Now()
		for op := 0; op < ops; op++ {
			i := order.At(op)
			start := time.Now()
			v, err := s.get(Key(kb[:], i))
			lat[op] = time.Since(start)
			if err != nil {
				return int64(op), fmt.Errorf("get key %d: %w", i, err)
			}
			if string(v) != string(Value(vb[:], i)) {
				return int64(op), fmt.Errorf("get key %d: wrong value", i)
			}
		}
		writes, secs := written.Load()-w0, time.Since(t0).Seconds()
		select {
		case err := <-errc:
			return int64(ops), fmt.Errorf("writers: %w", err)
		default:
		}
		report("get-p50-us", us(quantile(lat, 0.5)))
		report("get-p99-us", us(quantile(lat, 0.99)))
		report("get-p999-us", us(quantile(lat, 0.999)))
		report("writes/s", float64(writes)/secs)
		return int64(ops), nil
	}
}

// loadStore puts keys 0..n-1 into s in durable batches through putBatch.
func loadStore(n int, putBatch func(keys, values [][]byte) error) error {
	for start := 0; start < n; start += loadBatch {
		var keys, vals [][]byte
		for i := start; i < min(start+loadBatch, n); i++ {
			var b kvBuf
			k, v := b.kv(uint64(i))
			keys, vals = append(keys, k), append(vals, v)
		}
		if err := putBatch(keys, vals); err != nil {
			return err
		}
	}
	return nil
}

// appendPutsBatch appends one durable batch of puts to one anchor (the
// batch's number, from its first key, round-robin over ids).
func appendPutsBatch(db engineDB, ids []string, keys, values [][]byte) error {
	anchor := ids[be.Uint64(keys[0][8:])/loadBatch%uint64(len(ids))]
	entries := make([]engine.Entry, len(keys))
	for i := range keys {
		entries[i] = engine.Entry{Anchor: anchor, Type: segment.TypePut, Key: keys[i], Value: values[i]}
	}
	_, err := db.AppendBatch(context.Background(), entries)
	return err
}

type engineStore struct {
	db  engineDB
	ids []string
}

func (e engineStore) put(ctx context.Context, anchor int, key, value []byte) error {
	_, err := e.db.Put(ctx, e.ids[anchor], key, value)
	return err
}

func (e engineStore) get(key []byte) ([]byte, error) {
	v, err := e.db.Get(context.Background(), key)
	return v.Value, err
}

type pebbleStore struct{ db pebbleDB }

func (p pebbleStore) put(_ context.Context, _ int, key, value []byte) error {
	return p.db.Set(key, value, pebble.Sync)
}

func (p pebbleStore) get(key []byte) ([]byte, error) {
	v, closer, err := p.db.Get(key)
	if err != nil {
		return nil, err
	}
	out := append([]byte(nil), v...)
	return out, closer.Close()
}

// runUnderLoad is run for a body that reports metrics of its own.
func runUnderLoad(b *testing.B, prepare func(tb testing.TB, n int) store) {
	n := loadKeys()
	s := prepare(b, n)
	metrics := map[string]float64{}
	fn := underLoad(b, s, n, func(name string, v float64) { metrics[name] = v })
	b.ResetTimer()
	recs, err := fn(b.N)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(recs)/b.Elapsed().Seconds(), "records/s")
	for name, v := range metrics {
		b.ReportMetric(v, name)
	}
}

func prepareEngineLoad(tb testing.TB, n int) store {
	db := openWatched(tb, "", engine.Options{})
	ids := AnchorIDs(16)
	warmAnchors(tb, db, ids)
	err := loadStore(n, func(keys, values [][]byte) error {
		return appendPutsBatch(db, ids, keys, values)
	})
	if err == nil {
		err = db.quiesce(context.Background())
	}
	if err != nil {
		tb.Fatal(err)
	}
	return engineStore{db, ids}
}

func preparePebbleLoad(tb testing.TB, n int) store {
	db := openPebble(tb, "", tunedPebble)
	warmPebble(tb, db, 16)
	err := loadStore(n, func(keys, values [][]byte) error {
		b := db.NewBatch()
		for i := range keys {
			_ = b.Set(keys[i], values[i], nil)
		}
		defer b.Close()
		return b.Commit(pebble.Sync)
	})
	if err == nil {
		err = db.quiesce(context.Background())
	}
	if err != nil {
		tb.Fatal(err)
	}
	return pebbleStore{db}
}

func BenchmarkGetUnderLoad(b *testing.B) { runUnderLoad(b, prepareEngineLoad) }

func BenchmarkPeerPebbleGetUnderLoad(b *testing.B) { runUnderLoad(b, preparePebbleLoad) }
