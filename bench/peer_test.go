package bench

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// The peers: Pebble (github.com/cockroachdb/pebble/v2) doing each engine
// benchmark's work with default options except a quiet logger, on the real
// filesystem. Pebble is also what the engine indexes with, so a ratio below
// 1 is the price of the engine's work on top of Pebble (hashing, segments,
// index rows, the Merkle tree).

func pebbleOptions() (*pebble.Options, *quietLogger) {
	l := &quietLogger{}
	return &pebble.Options{Logger: l}, l
}

// openPebble opens a Pebble database in dir (a new temporary directory if
// empty), closed when tb ends.
func openPebble(tb testing.TB, dir string) *pebble.DB {
	tb.Helper()
	if dir == "" {
		dir = tb.TempDir()
	}
	opts, log := pebbleOptions()
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
	return db
}

// peerSet: writers goroutines each Set one key at a time with opts
// (pebble.Sync or pebble.NoSync) — the peer of appendSync and appendNoSync.
func peerSet(writers int, opts *pebble.WriteOptions) workload {
	return func(tb testing.TB) body {
		db := openPebble(tb, "")
		bufs := make([]kvBuf, writers)
		return func(n int) (int64, error) {
			err := Parallel(n, writers, func(w, i int) error {
				k, v := bufs[w].kv(uint64(i))
				return db.Set(k, v, opts)
			})
			return int64(n), err
		}
	}
}

// peerBatchSync: one goroutine commits batches of size Sets with
// pebble.Sync — the peer of appendBatchSync.
func peerBatchSync(size int) workload {
	return func(tb testing.TB) body {
		db := openPebble(tb, "")
		var buf kvBuf
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
			return int64(n * size), nil
		}
	}
}

// pebbleGetFixture is a directory holding a closed Pebble database with keys
// 0..n-1, loaded in batches of loadBatch like the engine's fixture.
var pebbleGetFixtures onceBySize[string]

func buildPebbleGetFixture(n int) (string, error) {
	dir, err := fixtureDir("pebble-get")
	if err != nil {
		return "", err
	}
	opts, _ := pebbleOptions()
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return "", err
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
			return "", fmt.Errorf("load: %w", err)
		}
	}
	// Like the engine fixture: closed, compacted, reopened for each run.
	if err := db.Close(); err != nil {
		return "", err
	}
	return dir, compactPebble(dir)
}

// compactPebble compacts the whole key space of the closed Pebble database
// in dir (a read fixture: the peer's, or the engine's index) and closes it.
func compactPebble(dir string) error {
	opts, _ := pebbleOptions()
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return err
	}
	end := bytes.Repeat([]byte{0xFF}, KeySize+1) // above every key of either database
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
		db := openPebble(tb, dir)
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

func BenchmarkPeerPebbleSync(b *testing.B) {
	for _, w := range syncWriters {
		b.Run(fmt.Sprintf("writers=%d", w), func(b *testing.B) { run(b, peerSet(w, pebble.Sync)) })
	}
}

func BenchmarkPeerPebbleBatchSync(b *testing.B) {
	for _, s := range batchSizes {
		b.Run(fmt.Sprintf("size=%d", s), func(b *testing.B) { run(b, peerBatchSync(s)) })
	}
}

func BenchmarkPeerPebbleNoSync(b *testing.B) {
	for _, w := range noSyncWriters {
		b.Run(fmt.Sprintf("writers=%d", w), func(b *testing.B) { run(b, peerSet(w, pebble.NoSync)) })
	}
}

func BenchmarkPeerPebbleGet(b *testing.B) { run(b, peerGet(getKeys, false)) }
