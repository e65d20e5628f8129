// Package peers adds the engines that anchordb's own module must not depend
// on — Badger, immudb and Tessera — to the benchmark harness. It is a
// nested module (bench/peers/go.mod), so their dependency graphs never reach
// anchordb's go.mod.
//
// Each peer runs at its best documented configuration for the workload
// (docs/PERFORMANCE.md, "Against real peers", cites the sources), and
// states it (harness.Configured) beside its results.
package peers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anchordb/anchordb/bench/harness"
	"github.com/codenotary/immudb/embedded/logger"
	"github.com/codenotary/immudb/embedded/store"
	"github.com/codenotary/immudb/embedded/tbtree"
	badger "github.com/dgraph-io/badger/v4"
	"github.com/transparency-dev/tessera"
	"github.com/transparency-dev/tessera/storage/posix"
	"golang.org/x/mod/sumdb/note"
)

// Openers are every system: the main module's and the ones here.
func Openers() []harness.Opener {
	return append(harness.MainOpeners(),
		harness.Opener{Name: "badger", Open: OpenBadger},
		harness.Opener{Name: "immudb", Open: OpenImmudb},
		// Waiting for the index is what the second immudb row changes:
		// the appends alone.
		harness.Opener{Name: "immudb-indexed", Open: OpenImmudbIndexed, Only: []string{"sync-append", "batch-sync"}},
		// A log of entries: appends, proofs and space, no reads by key.
		harness.Opener{Name: "tessera-posix", Open: OpenTessera, Only: []string{"sync-append", "batch-sync", "proof", "space"}},
	)
}

// OpenBadger opens Badger v4 as it comes, with SyncWrites: every committed
// transaction is fsynced before Update returns (Badger batches concurrent
// commits through its write channel, each request synced). Badger's
// durability is a database-wide option, so it has no no-sync append here.
func OpenBadger(dir string, _ harness.Setup) (harness.System, error) {
	b := &badgerDB{dir: dir}
	return b, b.open()
}

type badgerDB struct {
	dir string
	db  *badger.DB
}

func (b *badgerDB) open() error {
	// Every version is kept, so the history workload can read them back.
	db, err := badger.Open(badger.DefaultOptions(b.dir).WithSyncWrites(true).WithLogger(nil).
		WithNumVersionsToKeep(math.MaxInt32))
	if err != nil {
		return err
	}
	b.db = db
	return nil
}

func (b *badgerDB) Name() string { return "badger" }
func (b *badgerDB) Configuration() string {
	return "Badger v4.9.6, DefaultOptions with SyncWrites(true) (every Update fsynced before it returns) and every version kept"
}
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

// Settle closes and reopens the database: Badger offers no flush of its
// memtables but the one its Close does.
func (b *badgerDB) Settle(context.Context) error {
	if err := b.db.Close(); err != nil {
		return err
	}
	b.db = nil
	return b.open()
}

// Compact flattens the LSM into one level and collects the value log
// until there is nothing left to rewrite.
func (b *badgerDB) Compact(context.Context) error {
	if err := b.db.Flatten(1); err != nil {
		return err
	}
	for {
		err := b.db.RunValueLogGC(0.01)
		if errors.Is(err, badger.ErrNoRewrite) || errors.Is(err, badger.ErrRejected) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (b *badgerDB) Close() error {
	if b.db == nil {
		return nil
	}
	return b.db.Close()
}

// OpenImmudb opens the immudb embedded store (v1.10.0) synced, at the
// point of its documentation's advice for write throughput ("Performance
// guide": insert without waiting for the index, noWait): a transaction's
// Commit returns once it is durable, its indexing behind
// (OngoingTx.AsyncCommit). That is anchordb's acknowledgement too: durable
// in the journal, indexed behind. SyncFrequency is its documented default
// (20 ms: the syncer waits up to that long for more transactions to share
// an fsync); MaxConcurrency 256, above the 30 by default, so 64 writers are
// not refused. Reads wait for the index to catch up first (WaitVisible).
// Its durability is store-wide, so it has no no-sync append here.
func OpenImmudb(dir string, _ harness.Setup) (harness.System, error) {
	return openImmudb(dir, "immudb", false)
}

// OpenImmudbIndexed is immudb with Commit waiting for its index as well
// (OngoingTx.Commit): the second immudb row, for the append workloads.
func OpenImmudbIndexed(dir string, _ harness.Setup) (harness.System, error) {
	return openImmudb(dir, "immudb-indexed", true)
}

func openImmudb(dir, name string, waitIndex bool) (harness.System, error) {
	opts := store.DefaultOptions().WithSynced(true).WithMaxConcurrency(256).
		WithLogger(logger.NewSimpleLogger("immudb ", io.Discard))
	st, err := store.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	return &immuStore{st: st, name: name, waitIndex: waitIndex, syncFreq: opts.SyncFrequency}, nil
}

type immuStore struct {
	st        *store.ImmuStore
	name      string
	waitIndex bool
	syncFreq  time.Duration
}

func (s *immuStore) Name() string { return s.name }
func (s *immuStore) Configuration() string {
	ack := "Commit returns once durable, indexing behind (AsyncCommit)"
	if s.waitIndex {
		ack = "Commit returns once durable and indexed (Commit)"
	}
	return fmt.Sprintf("immudb v1.10.0 embedded store, Synced, SyncFrequency %v (default), MaxConcurrency 256; a write-only transaction per call; %s", s.syncFreq, ack)
}

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
	if s.waitIndex {
		_, err = tx.Commit(ctx)
	} else {
		_, err = tx.AsyncCommit(ctx)
	}
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

// WaitVisible waits until the index covers every committed transaction.
func (s *immuStore) WaitVisible(ctx context.Context) error {
	return s.st.WaitForIndexingUpto(ctx, s.st.LastCommittedTxID())
}

// Settle waits for the index and flushes it to disk.
func (s *immuStore) Settle(ctx context.Context) error {
	if err := s.WaitVisible(ctx); err != nil {
		return err
	}
	return s.st.FlushIndexes(0, true)
}

// Quiesce is Settle: the index that AsyncCommit left behind caught up and
// flushed, inside the write workloads' clock.
func (s *immuStore) Quiesce(ctx context.Context) error { return s.Settle(ctx) }

// Compact compacts the index (a store too small for immudb to compact
// counts as compacted).
func (s *immuStore) Compact(context.Context) error {
	err := s.st.CompactIndexes()
	if errors.Is(err, tbtree.ErrCompactionThresholdNotReached) {
		return nil
	}
	return err
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

// Tessera's settings (storage/posix/files.go: the POSIX driver refuses a
// checkpoint interval below 100 ms).
const (
	tesseraMaxAge             = time.Millisecond
	tesseraCheckpointInterval = time.Second
	tesseraProofInterval      = 100 * time.Millisecond
)

// OpenTessera opens Tessera's POSIX log. An append is acknowledged when its
// entry is sequenced and integrated into the tree on disk (its index future
// resolves; the POSIX driver fsyncs bundles, tiles and tree state before
// that). Batching follows Tessera's advice (WithBatching: larger batches
// cost less, more frequent ones integrate sooner) at the workload's
// concurrency: a batch of at most the records in flight (the writers, or
// the records of one batch), so no batch waits for entries that cannot
// come, or 1 ms. Checkpoints are published every second, and every 100 ms
// (the driver's minimum) for the proof workload. A log holds entries, not
// keys: no reads by key.
func OpenTessera(dir string, s harness.Setup) (harness.System, error) {
	ctx, cancel := context.WithCancel(context.Background())
	skey, vkey, err := note.GenerateKey(bytes.NewReader(bytes.Repeat([]byte{1}, 64)), "peerbench")
	if err != nil {
		cancel()
		return nil, err
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		cancel()
		return nil, err
	}
	verifier, err := note.NewVerifier(vkey)
	if err != nil {
		cancel()
		return nil, err
	}
	driver, err := posix.New(ctx, posix.Config{Path: dir})
	if err != nil {
		cancel()
		return nil, err
	}
	batch := max(1, s.InFlight)
	interval := tesseraCheckpointInterval
	if s.Workload == "proof" {
		interval = tesseraProofInterval
	}
	opts := tessera.NewAppendOptions().WithCheckpointSigner(signer).WithBatching(uint(batch), tesseraMaxAge).
		WithCheckpointInterval(interval)
	app, shutdown, reader, err := tessera.NewAppender(ctx, driver, opts)
	if err != nil {
		cancel()
		return nil, err
	}
	return &tesseraLog{app: app, reader: reader, verifier: verifier, shutdown: shutdown, cancel: cancel,
		batch: batch, interval: interval}, nil
}

type tesseraLog struct {
	app      *tessera.Appender
	reader   tessera.LogReader
	verifier note.Verifier
	shutdown func(context.Context) error
	cancel   context.CancelFunc
	batch    int
	interval time.Duration
}

func (t *tesseraLog) Name() string { return "tessera-posix" }
func (t *tesseraLog) Configuration() string {
	return fmt.Sprintf("Tessera v1.0.4 POSIX driver; acknowledged when integrated (index future resolved); batches of up to %d entries (the records in flight) or %v; checkpoints every %v; no antispam", t.batch, tesseraMaxAge, t.interval)
}

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

// Settle has nothing to do: an integrated entry is on disk, and the log
// keeps nothing in memory to flush.
func (t *tesseraLog) Settle(context.Context) error { return nil }

// Prove appends the entry and waits, from its integration, until a
// published checkpoint (signature checked) covers it: Tessera's time to an
// integrated checkpoint.
func (t *tesseraLog) Prove(ctx context.Context, key, value []byte) (time.Duration, error) {
	idx, err := t.app.Add(ctx, entry(key, value))()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	for {
		raw, err := t.reader.ReadCheckpoint(ctx)
		if err == nil && len(raw) > 0 {
			size, err := t.checkpointSize(raw)
			if err != nil {
				return 0, err
			}
			if size > idx.Index {
				return time.Since(start), nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// checkpointSize opens a checkpoint note and returns the tree size it
// commits to (its second line, C2SP tlog-checkpoint).
func (t *tesseraLog) checkpointSize(raw []byte) (uint64, error) {
	n, err := note.Open(raw, note.VerifierList(t.verifier))
	if err != nil {
		return 0, fmt.Errorf("tessera checkpoint: %w", err)
	}
	lines := strings.SplitN(n.Text, "\n", 3)
	if len(lines) < 3 {
		return 0, fmt.Errorf("tessera checkpoint: %d lines", len(lines))
	}
	return strconv.ParseUint(lines[1], 10, 64)
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
