package harness

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
	"golang.org/x/sys/unix"
)

// Anchors is how many anchors anchordb spreads a run's writers over (record
// i goes to anchor i mod Anchors, so a group commit touches many anchors).
const Anchors = 16

// OpenAnchorDB opens anchordb with its defaults: sync appends are durable
// in the group-committed journal on return; NoSync appends have reached the
// OS. The only addition is a listener on the index's Pebble events
// (through Options.PebbleOptions), so Settle can wait out the index's
// compactions as it does a Pebble peer's.
func OpenAnchorDB(dir string, _ Setup) (System, error) {
	a := &anchorDB{dir: filepath.Join(dir, "db"), ids: make([]string, Anchors)}
	for i := range a.ids {
		a.ids[i] = anchorID(i)
	}
	if err := a.open(); err != nil {
		return nil, err
	}
	return a, nil
}

// anchorIndex is the anchor (of Anchors) a key's record goes to: the key's
// record number mod Anchors.
func anchorIndex(key []byte) int { return int(binary.BigEndian.Uint64(key[8:]) % Anchors) }

// anchorID names anchor i.
func anchorID(i int) string { return fmt.Sprintf("anchor-%02d", i) }

type anchorDB struct {
	dir   string
	db    *engine.DB
	ids   []string
	watch *LSMWatch
	// The proof workload's keys, made on first use.
	signer, verifier string
}

func (a *anchorDB) open() error {
	a.watch = &LSMWatch{}
	db, err := engine.Open(a.dir, engine.Options{PebbleOptions: a.watch.Install})
	if err != nil {
		return err
	}
	a.db = db
	return nil
}

func (a *anchorDB) Name() string { return "anchordb" }

func (a *anchorDB) Configuration() string {
	return fmt.Sprintf("default options; %d anchors (record i to anchor i mod %d); Put acknowledged after the journal fdatasync of its commit group; NoSync once written to the OS", Anchors, Anchors)
}

func (a *anchorDB) anchor(key []byte) string {
	return a.ids[anchorIndex(key)]
}

func (a *anchorDB) Put(ctx context.Context, _ int, key, value []byte) error {
	_, err := a.db.Put(ctx, a.anchor(key), key, value)
	return err
}

func (a *anchorDB) PutNoSync(ctx context.Context, _ int, key, value []byte) error {
	_, err := a.db.Put(ctx, a.anchor(key), key, value, engine.WithNoSync(true))
	return err
}

// PutBatch appends the batch to one anchor (the anchor of its first key),
// atomically, as AppendBatch does.
func (a *anchorDB) PutBatch(ctx context.Context, keys, values [][]byte) error {
	es := make([]engine.Entry, len(keys))
	anchor := a.anchor(keys[0])
	for i := range keys {
		es[i] = engine.Entry{Anchor: anchor, Type: segment.TypePut, Key: keys[i], Value: values[i]}
	}
	_, err := a.db.AppendBatch(ctx, es)
	return err
}

// PutVersions appends a version of each key, as PutBatch.
func (a *anchorDB) PutVersions(ctx context.Context, keys, values [][]byte) error {
	return a.PutBatch(ctx, keys, values)
}

// History reads the key's versions, values and receipts, in merged order
// (Versions: what CONTRACT §4 calls History; the engine's History returns whole
// records, reading each from its segment, which the peers have no
// counterpart of).
func (a *anchorDB) History(ctx context.Context, key []byte) (int, error) {
	n := 0
	for v, err := range a.db.Versions(ctx, key) {
		if err != nil {
			return n, err
		}
		if len(v.Value) == 0 {
			return n, fmt.Errorf("version %d of the key has no value", n)
		}
		n++
	}
	return n, nil
}

// Merge reads every record in merged order.
func (a *anchorDB) Merge(ctx context.Context) (int, error) {
	n := 0
	for _, err := range a.db.Merged(ctx, engine.MergedOptions{}) {
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// Verify runs a full verification (every chain, tree, stub and index row)
// with the given threads.
func (a *anchorDB) Verify(ctx context.Context, threads int) (int, error) {
	rep, err := a.db.Verify(ctx, engine.VerifyOptions{Threads: threads})
	if err != nil {
		return int(rep.Records), err
	}
	if !rep.OK {
		return int(rep.Records), fmt.Errorf("verify found %d failures", len(rep.Failures))
	}
	return int(rep.Records), nil
}

// Snapshot writes a durable snapshot of the current state.
func (a *anchorDB) Snapshot(ctx context.Context) (int, error) {
	info, err := a.db.CreateSnapshot(ctx, "")
	return int(info.Entries), err
}

func (a *anchorDB) Get(ctx context.Context, key []byte) ([]byte, error) {
	v, err := a.db.Get(ctx, key)
	return v.Value, err
}

// Settle is Sync (segments fsynced, the index flushed, the journal
// trimmed), then a wait until the index has no flush or compaction in
// progress.
func (a *anchorDB) Settle(ctx context.Context) error {
	if err := a.db.Sync(ctx); err != nil {
		return err
	}
	return a.watch.Quiesce(ctx)
}

// Quiesce is Settle.
func (a *anchorDB) Quiesce(ctx context.Context) error { return a.Settle(ctx) }

// Compact closes the database, compacts its whole index (a manual Pebble
// compaction of the closed index, with the index's own options) and opens
// the database again. The segments are the log and are never rewritten;
// the journal is empty after a close.
func (a *anchorDB) Compact(ctx context.Context) error {
	if err := a.db.Close(); err != nil {
		return err
	}
	a.db = nil
	o := IndexPebbleOptions()
	o.DisableWAL = true // the index has no WAL: the journal is its log
	if err := CompactPebbleDir(ctx, filepath.Join(a.dir, engine.IndexDir), o); err != nil {
		return err
	}
	return a.open()
}

// Prove appends the record, then signs a checkpoint on demand and proves
// the record's inclusion against it (ProveAppend): the time to proof.
func (a *anchorDB) Prove(ctx context.Context, key, value []byte) (time.Duration, error) {
	if a.signer == "" {
		var err error
		if a.signer, a.verifier, err = proof.GenerateKeys("bench"); err != nil {
			return 0, err
		}
	}
	anchor := a.anchor(key)
	r, err := a.db.Put(ctx, anchor, key, value)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := ProveAppend(ctx, a.db, a.signer, a.verifier, anchor, r.Seq); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func (a *anchorDB) Close() error {
	if a.db == nil {
		return nil
	}
	return a.db.Close()
}

// ProveAppend is what a client needs after an append of seq to anchor
// returned: a signed checkpoint covering it, made on demand
// (CreateCheckpoint: signed and stored durably), and an inclusion proof of
// the record against that checkpoint's root for the anchor. It also checks
// both as the client would: the note's signature with the verifier key,
// the anchor's size in it, and the proof against the signed root.
func ProveAppend(ctx context.Context, db *engine.DB, signerKey, verifierKey, anchor string, seq uint64) error {
	note, _, err := db.CreateCheckpoint(ctx, signerKey)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	cp, err := proof.OpenCheckpoint(note, verifierKey)
	if err != nil {
		return fmt.Errorf("open checkpoint: %w", err)
	}
	e, ok := cp.Entry(anchor)
	if !ok || e.Size < seq {
		return fmt.Errorf("the checkpoint does not cover %s #%d (size %d)", anchor, seq, e.Size)
	}
	p, err := db.ProveInclusion(ctx, anchor, seq, e.Size)
	if err != nil {
		return fmt.Errorf("prove: %w", err)
	}
	if err := proof.VerifyInclusionProof(p); err != nil {
		return err
	}
	if p.Root != e.Root {
		return fmt.Errorf("the proof's root is not the checkpoint's for %s", anchor)
	}
	return nil
}

// CompactPebbleDir opens the closed Pebble store in dir with o, compacts
// its whole key space and closes it.
func CompactPebbleDir(ctx context.Context, dir string, o *pebble.Options) error {
	db, err := pebble.Open(dir, o)
	if err != nil {
		return err
	}
	err = compactAll(ctx, db)
	return errors.Join(err, db.Close())
}

// compactAll compacts every key the harness writes (keys of up to 24 bytes,
// the history workload's included; anchordb's index rows start with a
// one-byte tag).
func compactAll(ctx context.Context, db *pebble.DB) error {
	return db.Compact(ctx, []byte{0}, bytes.Repeat([]byte{0xFF}, 64), true)
}

// OpenPebble opens Pebble v2 with the options of anchordb's index
// (IndexPebbleOptions); Put commits with pebble.Sync (its WAL
// group-commits concurrent writers), PutNoSync with pebble.NoSync.
func OpenPebble(dir string, _ Setup) (System, error) {
	return openPebble(dir, "pebble", IndexPebbleOptions(),
		"Pebble v2.1.7 with anchordb's index options (64 MiB memtables and block cache, L0 compaction at 4 files and stop at 24, FormatNewest) and its WAL; Set with pebble.Sync, a batch Commit(pebble.Sync); NoSync: pebble.NoSync")
}

// OpenPebbleDefault opens Pebble v2 with its default options (a quiet
// logger aside): the second Pebble row.
func OpenPebbleDefault(dir string, _ Setup) (System, error) {
	return openPebble(dir, "pebble-default", DefaultPebbleOptions(),
		"Pebble v2.1.7 with its default options (4 MiB memtables, 8 MiB block cache); Set with pebble.Sync, a batch Commit(pebble.Sync); NoSync: pebble.NoSync")
}

func openPebble(dir, name string, o *pebble.Options, config string) (System, error) {
	p := &pebbleDB{name: name, config: config, watch: &LSMWatch{}}
	p.watch.Install(o)
	db, err := pebble.Open(dir, o)
	if err != nil {
		return nil, err
	}
	p.db = db
	return p, nil
}

type pebbleDB struct {
	name, config string
	db           *pebble.DB
	watch        *LSMWatch
	version      atomic.Uint64 // of PutVersions
}

func (p *pebbleDB) Name() string          { return p.name }
func (p *pebbleDB) Configuration() string { return p.config }
func (p *pebbleDB) Put(_ context.Context, _ int, key, value []byte) error {
	return p.db.Set(key, value, pebble.Sync)
}
func (p *pebbleDB) PutNoSync(_ context.Context, _ int, key, value []byte) error {
	return p.db.Set(key, value, pebble.NoSync)
}
func (p *pebbleDB) PutBatch(_ context.Context, keys, values [][]byte) error {
	b := p.db.NewBatch()
	for i := range keys {
		_ = b.Set(keys[i], values[i], nil)
	}
	return b.Commit(pebble.Sync)
}

// PutVersions keeps versions as Pebble users do: the key with a suffix
// (an inverted version number, so the newest sorts first), one Sync batch.
func (p *pebbleDB) PutVersions(_ context.Context, keys, values [][]byte) error {
	b := p.db.NewBatch()
	for i := range keys {
		k := binary.BigEndian.AppendUint64(append([]byte(nil), keys[i]...), ^p.version.Add(1))
		_ = b.Set(k, values[i], nil)
	}
	return b.Commit(pebble.Sync)
}

// History iterates the key's versions, newest first, copying each value.
func (p *pebbleDB) History(_ context.Context, key []byte) (int, error) {
	upper := binary.BigEndian.AppendUint64(append([]byte(nil), key...), ^uint64(0))
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: key, UpperBound: append(upper, 0)})
	if err != nil {
		return 0, err
	}
	n := 0
	var v []byte
	for ok := it.First(); ok; ok = it.Next() {
		v = append(v[:0], it.Value()...)
		n++
	}
	return n, errors.Join(it.Error(), it.Close())
}

func (p *pebbleDB) Get(_ context.Context, key []byte) ([]byte, error) {
	v, closer, err := p.db.Get(key)
	if err != nil {
		return nil, err
	}
	out := append([]byte(nil), v...)
	return out, closer.Close()
}

// Settle flushes the memtables and waits until no flush or compaction is
// in progress.
func (p *pebbleDB) Settle(ctx context.Context) error {
	if err := p.db.Flush(); err != nil {
		return err
	}
	return p.watch.Quiesce(ctx)
}

// Quiesce is Settle.
func (p *pebbleDB) Quiesce(ctx context.Context) error { return p.Settle(ctx) }

// Compact compacts the whole key space.
func (p *pebbleDB) Compact(ctx context.Context) error {
	if err := compactAll(ctx, p.db); err != nil {
		return err
	}
	return p.watch.Quiesce(ctx)
}

func (p *pebbleDB) Close() error { return p.db.Close() }

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// OpenFile is the physical floor: records appended to one file, each Put
// durable by fdatasync. The file is preallocated in 64 MiB steps of written
// zeros (the first before Open returns), so a sync writes data over blocks
// the file already has: neither a new file size nor fallocate's unwritten
// extents, which cost a metadata commit on their first sync. anchordb's
// journal does the same, in smaller steps (docs/DESIGN.md §1). Concurrent
// writers share syncs (a writer whose bytes a sync already covered does not
// sync again), as a group commit would; nothing is indexed, hashed or
// readable by key. Its "proof" is one write and fdatasync: the disk's own
// time, the reference of the proof workload.
func OpenFile(dir string, _ Setup) (System, error) {
	f, err := os.OpenFile(filepath.Join(dir, "log"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	p := &plainFile{f: f}
	p.done = sync.NewCond(&p.syncMu)
	if err := p.extend(); err != nil {
		_ = f.Close()
		return nil, err
	}
	return p, nil
}

// fileChunk is the file floor's preallocation step (a variable so the
// package's tests, which open the floor many times, write less).
var fileChunk int64 = 64 << 20

type plainFile struct {
	mu    sync.Mutex // serialises writes
	f     *os.File
	end   int64 // bytes written
	alloc int64 // bytes preallocated
	// Group commit: one fdatasync in flight at a time; it covers every byte
	// written before it started, and every writer it covered is woken at
	// once. (A mutex around the fsync instead made writers the last sync
	// had covered queue behind the next one.)
	syncMu  sync.Mutex
	synced  int64 // bytes durable
	syncing bool  // a sync is in flight
	done    *sync.Cond
	buf     []byte
}

func (p *plainFile) Name() string { return "file+fdatasync" }

func (p *plainFile) Configuration() string {
	return "one file, preallocated with written zeros in 64 MiB steps; pwrite, then a group-committed fdatasync (one in flight, every writer it covered woken at once)"
}

func (p *plainFile) write(keys, values [][]byte) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.buf[:0]
	for i := range keys {
		b = binary.BigEndian.AppendUint32(b, uint32(len(keys[i])))
		b = append(b, keys[i]...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(values[i])))
		b = append(b, values[i]...)
	}
	p.buf = b
	for p.end+int64(len(b)) > p.alloc {
		if err := p.extend(); err != nil {
			return p.end, err
		}
	}
	n, err := p.f.WriteAt(b, p.end)
	p.end += int64(n)
	return p.end, err
}

// extend writes the next fileChunk of zeros and makes them and the new size
// durable, so later syncs rely on data alone.
func (p *plainFile) extend() error {
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < fileChunk; off += int64(len(zeros)) {
		if _, err := p.f.WriteAt(zeros, p.alloc+off); err != nil {
			return err
		}
	}
	if err := p.f.Sync(); err != nil {
		return err
	}
	p.alloc += fileChunk
	return nil
}

func (p *plainFile) sync(upTo int64) error {
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	for p.synced < upTo {
		if p.syncing {
			p.done.Wait()
			continue
		}
		p.syncing = true
		p.syncMu.Unlock()
		p.mu.Lock()
		end := p.end
		p.mu.Unlock()
		err := unix.Fdatasync(int(p.f.Fd()))
		p.syncMu.Lock()
		p.syncing = false
		if err == nil {
			p.synced = max(p.synced, end)
		}
		p.done.Broadcast()
		if err != nil {
			return err
		}
	}
	return nil
}

func (p *plainFile) Put(_ context.Context, _ int, key, value []byte) error {
	end, err := p.write([][]byte{key}, [][]byte{value})
	if err != nil {
		return err
	}
	return p.sync(end)
}

func (p *plainFile) PutNoSync(_ context.Context, _ int, key, value []byte) error {
	_, err := p.write([][]byte{key}, [][]byte{value})
	return err
}

func (p *plainFile) PutBatch(_ context.Context, keys, values [][]byte) error {
	end, err := p.write(keys, values)
	if err != nil {
		return err
	}
	return p.sync(end)
}

// Prove times one write and fdatasync of the record.
func (p *plainFile) Prove(ctx context.Context, key, value []byte) (time.Duration, error) {
	start := time.Now()
	err := p.Put(ctx, 0, key, value)
	return time.Since(start), err
}

func (p *plainFile) Close() error { return p.f.Close() }

// MainOpeners are the systems of the main module.
func MainOpeners() []Opener {
	return []Opener{{Name: "anchordb", Open: OpenAnchorDB}, {Name: "pebble", Open: OpenPebble},
		{Name: "pebble-default", Open: OpenPebbleDefault},
		{Name: "file+fdatasync", Open: OpenFile, Only: []string{"sync-append", "batch-sync", "nosync-append", "proof"}},
		{Name: "floor", Open: OpenFloor, Only: FloorWorkloads}}
}
