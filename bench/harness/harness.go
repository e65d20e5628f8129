// Package harness runs named storage workloads against anchordb and other
// engines ("systems") in one process, with the same keys, values and
// durability for each, and reports throughput, latency percentiles, bytes on
// disk and peak heap as a table, JSON and SVG charts.
//
// A run goes over the workloads in order; each workload runs Rounds times,
// and each round runs every system once, in the same order, each on a fresh
// directory: engine and peers alternate, so a drift of the machine (the
// disk's fsync latency moves by 2× within minutes on a shared VM) falls on
// every system alike. The table gives each system's median over the rounds
// and anchordb's ratio to it as the median of the per-round ratios, with
// their spread, never a ratio of separately taken medians.
//
// The systems of the main module (anchordb, Pebble tuned as anchordb's index
// and Pebble's defaults, a plain fdatasync'd file, the compute floor) live
// in this package; engines that would grow anchordb's dependency graph
// (Badger, immudb, Tessera) live in the nested module bench/peers, whose
// peerbench command runs every system side by side.
package harness

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
)

// System is one storage engine under test. Put must return only once the
// record is durable (acknowledged after fsync), the same for every system.
type System interface {
	Name() string
	Put(ctx context.Context, writer int, key, value []byte) error
	Close() error
}

// Configured is implemented by a system that states how it is configured
// (one line, printed beside its results: the peers' settings matter as much
// as their numbers).
type Configured interface {
	Configuration() string
}

// Batcher appends many records durably in one call.
type Batcher interface {
	PutBatch(ctx context.Context, keys, values [][]byte) error
}

// NoSyncer appends a record that need not be durable on return (each
// system's weakest acknowledged mode; see the system's doc).
type NoSyncer interface {
	PutNoSync(ctx context.Context, writer int, key, value []byte) error
}

// Getter reads the latest value of a key.
type Getter interface {
	Get(ctx context.Context, key []byte) ([]byte, error)
}

// Historian keeps every version of a key and reads them back, newest first.
type Historian interface {
	// PutVersions appends, durably and as one batch, a new version of each
	// key.
	PutVersions(ctx context.Context, keys, values [][]byte) error
	// History reads every version of key and returns how many there were.
	History(ctx context.Context, key []byte) (int, error)
}

// Merger reads every record loaded in the deterministic merged order
// (CONTRACT §1) and returns how many it read.
type Merger interface {
	Merge(ctx context.Context) (int, error)
}

// Verifier checks every record loaded (hash chains, proofs, index) with the
// given number of threads and returns how many it checked.
type Verifier interface {
	Verify(ctx context.Context, threads int) (int, error)
}

// Snapshotter writes the current state (the newest value of every key) to a
// compressed snapshot and returns how many keys it holds.
type Snapshotter interface {
	Snapshot(ctx context.Context) (int, error)
}

// Settler brings a system to rest: everything acknowledged written out of
// memory (memtables flushed, logs settled) and no background flush or
// compaction in progress. get-flushed reads after it; space measures after
// it.
type Settler interface {
	Settle(ctx context.Context) error
}

// Quiescer brings a system to rest after a write workload, inside its
// clock: equal work means the same records, each system until it is
// quiescent. It is Settle for the systems whose Settle is cheap to time
// (anchordb: Sync and the index's compactions done; Pebble: Flush and its
// compactions done; immudb: its index caught up and flushed). A system
// without it stops its clock at its last acknowledgement (the file floor
// and Tessera, whose acknowledged writes are already all on disk; Badger,
// which has no flush short of Close).
type Quiescer interface {
	Quiesce(ctx context.Context) error
}

// Compacter compacts everything the system holds as far as it can (a full
// manual compaction of its LSM or tree), for the space workload.
type Compacter interface {
	Compact(ctx context.Context) error
}

// Visibler waits until every acknowledged write is visible to reads (for a
// system whose acknowledgement comes before its index catches up and whose
// reads do not wait for it). The read workloads call it after loading,
// outside the clock.
type Visibler interface {
	WaitVisible(ctx context.Context) error
}

// Prover appends a record durably and then obtains what lets a client check
// it against a signed commitment. It returns the time from the append's
// acknowledgement to that point: the time to proof.
type Prover interface {
	Prove(ctx context.Context, key, value []byte) (time.Duration, error)
}

// HistoryVersions is how many versions each key of the history workload has.
const HistoryVersions = 8

// Setup is what a system is opened for: the workload, and how many records
// it keeps in flight at once (its writers, or the records of one batch), for
// a peer whose best configuration depends on it (Tessera's batch size).
type Setup struct {
	Workload string
	InFlight int
}

// Opener makes a system in a fresh directory.
type Opener struct {
	Name string
	Open func(dir string, s Setup) (System, error)
	// Only, if set, lists the workloads the system takes part in; it is
	// reported as skipped on the others without being opened.
	Only []string
}

// Config sizes a run.
type Config struct {
	Writers   int // concurrent writers of the append workloads
	ValueSize int
	Count     int // records per workload and system
	BatchSize int
	// ReadPasses is how many times get, get-flushed and history go over
	// every key (0 counts as 1). A pass over 20,000 keys held in memory
	// lasts about a tenth of a second, short enough for one scheduler
	// hiccup to halve a result; several passes make the read ratios
	// repeatable.
	ReadPasses int
	// VerifyThreads is the threads of the verify workload, the same on
	// every system (0 counts as 1).
	VerifyThreads int `json:"verify_threads"`
	// ProofOps is how many appends the proof workload proves, one after
	// the other (0 counts as DefaultProofOps).
	ProofOps int `json:"proof_ops"`
	// Rounds is how many times each workload runs on every system, the
	// systems alternating within each round (0 counts as 1).
	Rounds int    `json:"rounds"`
	Dir    string // parent of the systems' directories ("" = a temp dir)
	// Commit names the code measured (a git commit), for the results'
	// header; it sizes nothing.
	Commit string `json:"commit,omitempty"`
}

// DefaultProofOps is the proof workload's appends when Config.ProofOps is 0.
const DefaultProofOps = 200

func (c Config) readPasses() int    { return max(1, c.ReadPasses) }
func (c Config) verifyThreads() int { return max(1, c.VerifyThreads) }
func (c Config) rounds() int        { return max(1, c.Rounds) }
func (c Config) proofOps() int {
	if c.ProofOps == 0 {
		return DefaultProofOps
	}
	return c.ProofOps
}

// Limits of a Config. They keep a run within what one machine can hold: the
// harness makes every value in memory, holds a whole batch at once, the
// floor keeps every record loaded, and each read's latency is kept.
const (
	MaxCount      = 10_000_000 // records per workload and system
	MaxWriters    = 4096
	MaxBatchSize  = 100_000
	MaxReadPasses = 100
	// MaxReads bounds Count × read passes: the latencies of get and
	// history are kept, 8 bytes a read.
	MaxReads = 100_000_000
	// MaxTotalBytes bounds Count × ValueSize: the floor and the page cache
	// hold all of it.
	MaxTotalBytes = 8 << 30
	MaxThreads    = 256
	MaxProofOps   = 1_000_000
	MaxRounds     = 100
)

// MaxValueSize is the engine's value limit (segment.DefaultLimits, 16 MiB).
var MaxValueSize = segment.DefaultLimits().MaxValue

// Validate checks every size against its limit. A size outside is refused
// with INPUT_001 naming the limit, before anything is allocated or written.
func (c Config) Validate() error {
	for _, b := range []struct {
		what     string
		v, limit int
		min      int
	}{
		{"writers", c.Writers, MaxWriters, 1},
		{"value size", c.ValueSize, MaxValueSize, 1},
		{"count", c.Count, MaxCount, 1},
		{"batch size", c.BatchSize, MaxBatchSize, 1},
		{"read passes", c.ReadPasses, MaxReadPasses, 0},
		{"verify threads", c.VerifyThreads, MaxThreads, 0},
		{"proof operations", c.ProofOps, MaxProofOps, 0},
		{"rounds", c.Rounds, MaxRounds, 0},
	} {
		if b.v < b.min || b.v > b.limit {
			return errs.New(errs.CodeInvalidInput, "harness: %s %d is outside the limit %d..%d", b.what, b.v, b.min, b.limit)
		}
	}
	// Both factors are bounded above, so the products cannot overflow.
	if n := int64(c.BatchSize) * int64(c.ValueSize+batchOverhead); n > engine.MaxBatchBytes {
		return errs.New(errs.CodeInvalidInput, "harness: a batch of %d values of %d bytes is %d bytes, over the limit of %d bytes of one engine append (lower the batch size or the value size)",
			c.BatchSize, c.ValueSize, n, engine.MaxBatchBytes)
	}
	if n := int64(c.Count) * int64(c.ValueSize); n > MaxTotalBytes {
		return errs.New(errs.CodeInvalidInput, "harness: %d records of %d bytes are %d bytes, over the limit of %d bytes", c.Count, c.ValueSize, n, int64(MaxTotalBytes))
	}
	if n := int64(c.Count) * int64(c.readPasses()); n > MaxReads {
		return errs.New(errs.CodeInvalidInput, "harness: %d records × %d read passes are %d reads, over the limit of %d", c.Count, c.readPasses(), n, MaxReads)
	}
	return nil
}

// batchOverhead is what the engine counts for a record besides its value: a
// 16-byte key and its per-record overhead.
const batchOverhead = 16 + engine.RecordOverhead

// Workloads are the names Run understands, in report order.
var Workloads = []string{"sync-append", "batch-sync", "nosync-append", "get", "get-flushed", "history",
	"merge", "verify", "snapshot", "proof", "space"}

// singleOp lists the workloads whose measurement is one operation (a whole
// pass): their latency percentiles are that one duration, and the charts
// leave the latency panel out.
var singleOp = []string{"merge", "verify", "snapshot", "space"}

// Result is one system on one workload in one round.
type Result struct {
	Workload   string  `json:"workload"`
	System     string  `json:"system"`
	Round      int     `json:"round"`
	Config     string  `json:"config,omitempty"` // the system's configuration, as it states it
	Records    int     `json:"records"`
	Seconds    float64 `json:"seconds"`
	RecordsSec float64 `json:"records_per_sec"`
	// Latency of one operation: a record; a batch for batch-sync; one key's
	// whole history for history (whose records are versions read); the
	// time from an append's acknowledgement to its proof for proof; the
	// whole pass for merge, verify and snapshot (one operation each).
	P50us      float64 `json:"p50_us"`
	P99us      float64 `json:"p99_us"`
	P999us     float64 `json:"p999_us"`
	DiskBytes  int64   `json:"disk_bytes"`   // allocated bytes under the system's directory after Close
	PeakHeapMB float64 `json:"peak_heap_mb"` // sampled runtime HeapInuse during the run
	// The space workload: allocated bytes after Settle and after Compact
	// (and Close), the files' sizes after Compact (what they hold, without
	// space a system preallocated), and the records' logical bytes (keys
	// and values).
	SettledBytes       int64  `json:"settled_bytes,omitempty"`
	CompactedBytes     int64  `json:"compacted_bytes,omitempty"`
	CompactedFileBytes int64  `json:"compacted_file_bytes,omitempty"`
	LogicalBytes       int64  `json:"logical_bytes,omitempty"`
	Skipped            string `json:"skipped,omitempty"`
}

// Key and value of record i: 16-byte keys in random order (the SplitMix64
// finalizer of i, then i), values of size bytes of pseudo-random data.
func Key(i uint64) []byte {
	k := make([]byte, 16)
	binary.BigEndian.PutUint64(k, mix(i))
	binary.BigEndian.PutUint64(k[8:], i)
	return k
}

func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// Value returns a value of n bytes for record i.
func Value(i uint64, n int) []byte {
	v := make([]byte, n)
	r := rand.New(rand.NewPCG(i, 0x5eed))
	for j := 0; j < n; j += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], r.Uint64())
		copy(v[j:], w[:])
	}
	return v
}

// Run runs each workload against each system, each in a fresh directory,
// Rounds times over with the systems alternating. A system that lacks a
// workload's capability is reported as skipped (in the first round only).
func Run(ctx context.Context, cfg Config, openers []Opener, workloads []string, progress func(Result)) ([]Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Every name is checked before anything runs: a typo in the last one
	// must not cost the runs of the others, whose results would be lost.
	for _, w := range workloads {
		if !slices.Contains(Workloads, w) {
			return nil, fmt.Errorf("harness: unknown workload %q (have %v)", w, Workloads)
		}
	}
	root := cfg.Dir
	if root == "" {
		d, err := os.MkdirTemp("", "anchordb-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		root = d
	}
	var out []Result
	for _, w := range workloads {
		skipped := map[string]bool{}
		for round := 1; round <= cfg.rounds(); round++ {
			for _, o := range openers {
				if err := ctx.Err(); err != nil {
					return out, err
				}
				if skipped[o.Name] {
					continue
				}
				dir := filepath.Join(root, w+"-"+o.Name)
				if err := os.MkdirAll(dir, 0o755); err != nil {
					return out, err
				}
				r, err := runOne(ctx, cfg, o, w, dir)
				r.Round = round
				if err != nil {
					_ = os.RemoveAll(dir)
					return out, fmt.Errorf("%s on %s: %w", w, o.Name, err)
				}
				r.DiskBytes = du(dir)
				if err := os.RemoveAll(dir); err != nil {
					return out, err
				}
				if r.Skipped != "" {
					skipped[o.Name] = true
				}
				out = append(out, r)
				if progress != nil {
					progress(r)
				}
			}
		}
	}
	return out, nil
}
