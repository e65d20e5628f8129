// Package peers adds the engines that anchordb's own module must not depend
// on — Badger, immudb and Tessera — to the benchmark harness. It is a
// nested module (bench/peers/go.mod), so their dependency graphs never reach
// anchordb's go.mod.
package peers

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/anchordb/anchordb/bench/harness"
	"github.com/codenotary/immudb/embedded/logger"
	"github.com/codenotary/immudb/embedded/store"
	badger "github.com/dgraph-io/badger/v4"
	"github.com/transparency-dev/tessera"
	"github.com/transparency-dev/tessera/storage/posix"
	"golang.org/x/mod/sumdb/note"
)

// Openers are every system: the main module's and the three here.
func Openers() []harness.Opener {
	return append(harness.MainOpeners(),
		harness.Opener{Name: "badger", Open: OpenBadger},
		harness.Opener{Name: "immudb", Open: OpenImmudb},
		harness.Opener{Name: "tessera-posix", Open: OpenTessera},
	)
}

// OpenBadger opens Badger v4 with SyncWrites: every committed transaction
// is fsynced before Update returns (Badger batches concurrent commits).
// Badger's durability is a database-wide option, so it has no no-sync
// append here.
func OpenBadger(dir string) (harness.System, error) {
	// Every version is kept, so the history workload can read them back.
	db, err := badger.Open(badger.DefaultOptions(dir).WithSyncWrites(true).WithLogger(nil).
		WithNumVersionsToKeep(math.MaxInt32))
	if err != nil {
		return nil, err
	}
	return &badgerDB{db: db}, nil
}

type badgerDB struct{ db *badger.DB }

func (b *badgerDB) Name() string { return "badger" }
func (b *badgerDB) Put(_ context.Context, _ int, key, value []byte) error {
	return b.db.Update(func(txn *badger.Txn) error { return txn.Set(key, value) })
}
func (b *badgerDB) PutBatch(_ context.Context, keys, values [][]byte) error {
	return b.db.Update(func(txn *badger.Txn) error {
		for i := range keys {
			if err := txn.Set(keys[i], values[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// PutVersions commits a new version of each key in one transaction.
func (b *badgerDB) PutVersions(ctx context.Context, keys, values [][]byte) error {
	return b.PutBatch(ctx, keys, values)
}

// History iterates every version of the key (Badger's AllVersions), newest
// first, copying each value.
func (b *badgerDB) History(_ context.Context, key []byte) (int, error) {
	n := 0
	err := b.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.AllVersions, opts.Prefix = true, key
		it := txn.NewIterator(opts)
		defer it.Close()
		var v []byte
		for it.Seek(key); it.ValidForPrefix(key); it.Next() {
			var err error
			if v, err = it.Item().ValueCopy(v[:0]); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

func (b *badgerDB) Get(_ context.Context, key []byte) ([]byte, error) {
	var out []byte
	err := b.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(key)
		if err != nil {
			return err
		}
		out, err = it.ValueCopy(nil)
		return err
	})
	return out, err
}
func (b *badgerDB) Close() error { return b.db.Close() }

// OpenImmudb opens the immudb embedded store (v1.10.0) synced: Commit
// returns once the transaction is durable and indexed. Its durability is a
// store-wide option, so it has no no-sync append here.
func OpenImmudb(dir string) (harness.System, error) {
	opts := store.DefaultOptions().WithSynced(true).WithMaxConcurrency(256).
		WithLogger(logger.NewSimpleLogger("immudb ", io.Discard))
	st, err := store.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	return &immuStore{st: st}, nil
}

type immuStore struct{ st *store.ImmuStore }

func (s *immuStore) Name() string { return "immudb" }
func (s *immuStore) put(ctx context.Context, keys, values [][]byte) error {
	tx, err := s.st.NewWriteOnlyTx(ctx)
	if err != nil {
		return err
	}
	for i := range keys {
		if err := tx.Set(keys[i], nil, values[i]); err != nil {
			_ = tx.Cancel()
			return err
		}
	}
	_, err = tx.Commit(ctx)
	return err
}
func (s *immuStore) Put(ctx context.Context, _ int, key, value []byte) error {
	return s.put(ctx, [][]byte{key}, [][]byte{value})
}
func (s *immuStore) PutBatch(ctx context.Context, keys, values [][]byte) error {
	return s.put(ctx, keys, values)
}

// PutVersions commits a new version of each key in one transaction.
func (s *immuStore) PutVersions(ctx context.Context, keys, values [][]byte) error {
	return s.put(ctx, keys, values)
}

// History reads the key's history (newest first) and resolves every value.
func (s *immuStore) History(_ context.Context, key []byte) (int, error) {
	refs, _, err := s.st.History(key, 0, true, 1<<10)
	if err != nil {
		return 0, err
	}
	for _, r := range refs {
		if _, err := r.Resolve(); err != nil {
			return 0, err
		}
	}
	return len(refs), nil
}

func (s *immuStore) Get(ctx context.Context, key []byte) ([]byte, error) {
	ref, err := s.st.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return ref.Resolve()
}
func (s *immuStore) Close() error { return s.st.Close() }

// OpenTessera opens Tessera's POSIX log. An append is acknowledged when its
// entry is sequenced and integrated into the tree on disk (its index future
// resolves; the POSIX driver fsyncs bundles, tiles and tree state before
// that). Batching: up to 256 entries or 5 ms, so a lone writer is not held
// for Tessera's default batch age. A log holds entries, not keys: no reads
// by key.
func OpenTessera(dir string) (harness.System, error) {
	ctx, cancel := context.WithCancel(context.Background())
	skey, _, err := note.GenerateKey(bytes.NewReader(bytes.Repeat([]byte{1}, 64)), "peerbench")
	if err != nil {
		cancel()
		return nil, err
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		cancel()
		return nil, err
	}
	driver, err := posix.New(ctx, posix.Config{Path: dir})
	if err != nil {
		cancel()
		return nil, err
	}
	opts := tessera.NewAppendOptions().WithCheckpointSigner(signer).WithBatching(256, 5*time.Millisecond).
		WithCheckpointInterval(time.Second)
	app, shutdown, _, err := tessera.NewAppender(ctx, driver, opts)
	if err != nil {
		cancel()
		return nil, err
	}
	return &tesseraLog{app: app, shutdown: shutdown, cancel: cancel}, nil
}

type tesseraLog struct {
	app      *tessera.Appender
	shutdown func(context.Context) error
	cancel   context.CancelFunc
}

func (t *tesseraLog) Name() string { return "tessera-posix" }

// entry is the key and value as one log entry.
func entry(key, value []byte) *tessera.Entry {
	return tessera.NewEntry(append(append(make([]byte, 0, len(key)+len(value)), key...), value...))
}

func (t *tesseraLog) Put(ctx context.Context, _ int, key, value []byte) error {
	_, err := t.app.Add(ctx, entry(key, value))()
	return err
}

func (t *tesseraLog) PutBatch(ctx context.Context, keys, values [][]byte) error {
	futures := make([]tessera.IndexFuture, len(keys))
	for i := range keys {
		futures[i] = t.app.Add(ctx, entry(keys[i], values[i]))
	}
	var firstErr error
	var once sync.Once
	for _, f := range futures {
		if _, err := f(); err != nil {
			once.Do(func() { firstErr = err })
		}
	}
	return firstErr
}

func (t *tesseraLog) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := t.shutdown(ctx)
	t.cancel()
	if err != nil {
		return fmt.Errorf("tessera shutdown: %w", err)
	}
	return nil
}
