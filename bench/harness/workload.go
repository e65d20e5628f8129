package harness

// One workload on one system: its load, its measured pass, and the
// measurements (latencies, elapsed time, peak heap, bytes on disk).

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// inFlight is how many records w keeps in flight at once.
func inFlight(cfg Config, w string) int {
	switch w {
	case "sync-append":
		return cfg.Writers
	case "nosync-append", "proof":
		return 1
	}
	return cfg.BatchSize // the batch workloads, and the loads of the others
}

func runOne(ctx context.Context, cfg Config, o Opener, w, dir string) (Result, error) {
	res := Result{Workload: w, System: o.Name}
	if o.Only != nil && !slices.Contains(o.Only, w) {
		res.Skipped = "not a peer for this workload"
		return res, nil
	}
	sys, err := o.Open(dir, Setup{Workload: w, InFlight: inFlight(cfg, w)})
	if err != nil {
		return res, err
	}
	if c, ok := sys.(Configured); ok {
		res.Config = c.Configuration()
	}
	closed := false
	defer func() {
		if !closed {
			_ = sys.Close()
		}
	}()
	skip := func(why string) (Result, error) {
		res.Skipped = why
		return res, nil
	}
	var lat []time.Duration
	var elapsed time.Duration
	var peak float64
	// atRest ends a write workload's clock: the system quiescent.
	atRest := func(lat []time.Duration, err error) ([]time.Duration, error) {
		if q, ok := sys.(Quiescer); ok && err == nil {
			err = q.Quiesce(ctx)
		}
		return lat, err
	}
	switch w {
	case "sync-append":
		lat, elapsed, peak, err = measure(func() ([]time.Duration, error) {
			return atRest(parallel(ctx, cfg.Writers, cfg.Count, func(wr int, i uint64) error {
				return sys.Put(ctx, wr, Key(i), Value(i, cfg.ValueSize))
			}))
		})
		res.Records = cfg.Count
	case "nosync-append":
		ns, ok := sys.(NoSyncer)
		if !ok {
			return skip("no non-durable append")
		}
		lat, elapsed, peak, err = measure(func() ([]time.Duration, error) {
			return atRest(parallel(ctx, 1, cfg.Count, func(wr int, i uint64) error {
				return ns.PutNoSync(ctx, wr, Key(i), Value(i, cfg.ValueSize))
			}))
		})
		res.Records = cfg.Count
	case "batch-sync":
		bt, ok := sys.(Batcher)
		if !ok {
			return skip("no batch append")
		}
		batches := max(1, cfg.Count/cfg.BatchSize)
		lat, elapsed, peak, err = measure(func() ([]time.Duration, error) {
			return atRest(parallel(ctx, 1, batches, func(_ int, b uint64) error {
				keys := make([][]byte, cfg.BatchSize)
				vals := make([][]byte, cfg.BatchSize)
				for j := range keys {
					i := b*uint64(cfg.BatchSize) + uint64(j)
					keys[j], vals[j] = Key(i), Value(i, cfg.ValueSize)
				}
				return bt.PutBatch(ctx, keys, vals)
			}))
		})
		res.Records = batches * cfg.BatchSize
	case "get", "get-flushed":
		g, ok := sys.(Getter)
		bt, okb := sys.(Batcher)
		if !ok || !okb {
			return skip("no point reads")
		}
		st, oks := sys.(Settler)
		if w == "get-flushed" && !oks {
			return skip("no flush")
		}
		if err := load(ctx, sys, bt, cfg); err != nil {
			return res, fmt.Errorf("load: %w", err)
		}
		if w == "get-flushed" {
			if err := st.Settle(ctx); err != nil {
				return res, fmt.Errorf("settle: %w", err)
			}
		}
		reads := cfg.Count * cfg.readPasses()
		lat, elapsed, peak, err = measure(func() ([]time.Duration, error) {
			return parallel(ctx, 1, reads, func(_ int, i uint64) error {
				j := mix(i) % uint64(cfg.Count) // a fixed random order
				v, err := g.Get(ctx, Key(j))
				if err != nil {
					return fmt.Errorf("get %d: %w", j, err)
				}
				if len(v) != cfg.ValueSize {
					return fmt.Errorf("get %d: %d bytes, want %d", j, len(v), cfg.ValueSize)
				}
				return nil
			})
		})
		res.Records = reads
	case "history":
		h, ok := sys.(Historian)
		if !ok {
			return skip("no versions kept")
		}
		keys := max(1, cfg.Count/HistoryVersions)
		if err := loadVersions(ctx, h, keys, cfg); err != nil {
			return res, fmt.Errorf("load: %w", err)
		}
		if v, ok := sys.(Visibler); ok {
			if err := v.WaitVisible(ctx); err != nil {
				return res, fmt.Errorf("load: %w", err)
			}
		}
		var versions atomic.Int64
		lat, elapsed, peak, err = measure(func() ([]time.Duration, error) {
			return parallel(ctx, 1, keys*cfg.readPasses(), func(_ int, i uint64) error {
				j := mix(i) % uint64(keys)
				n, err := h.History(ctx, Key(j))
				if err != nil {
					return fmt.Errorf("history %d: %w", j, err)
				}
				if n != HistoryVersions {
					return fmt.Errorf("history %d: %d versions, want %d", j, n, HistoryVersions)
				}
				versions.Add(int64(n))
				return nil
			})
		})
		res.Records = int(versions.Load())
	case "merge", "verify", "snapshot":
		pass, ok := wholePass(sys, w, cfg)
		bt, okb := sys.(Batcher)
		if !ok || !okb {
			return skip("no " + w)
		}
		if err := load(ctx, sys, bt, cfg); err != nil {
			return res, fmt.Errorf("load: %w", err)
		}
		var n int
		lat, elapsed, peak, err = measure(func() ([]time.Duration, error) {
			start := time.Now()
			var err error
			n, err = pass(ctx)
			return []time.Duration{time.Since(start)}, err
		})
		// Every record is in the merged order and is verified; a snapshot
		// holds one entry per distinct key, and every key loaded is distinct.
		if err == nil && n != cfg.Count {
			err = fmt.Errorf("%s covered %d records, want %d", w, n, cfg.Count)
		}
		res.Records = n
	case "proof":
		p, ok := sys.(Prover)
		if !ok {
			return skip("no proofs")
		}
		// The log holds ProofBase records first (fewer if Count is
		// smaller), loaded in batches where the system takes them, so a
		// proof is not one of an empty tree. (A proof's cost grows with
		// the logarithm of the tree; Tessera, configured for one entry in
		// flight, loads one entry a batch.)
		base := min(cfg.Count, ProofBase)
		if bt, ok := sys.(Batcher); ok {
			if err := loadN(ctx, sys, bt, cfg, base); err != nil {
				return res, fmt.Errorf("load: %w", err)
			}
		}
		ops := cfg.proofOps()
		lat, elapsed, peak, err = measure(func() ([]time.Duration, error) {
			lat := make([]time.Duration, ops)
			for i := range lat {
				j := uint64(base + i)
				d, err := p.Prove(ctx, Key(j), Value(j, cfg.ValueSize))
				if err != nil {
					return lat, fmt.Errorf("proof %d: %w", i, err)
				}
				lat[i] = d
			}
			return lat, nil
		})
		res.Records = ops
	case "space":
		bt, okb := sys.(Batcher)
		st, oks := sys.(Settler)
		if !okb || !oks {
			return skip("no batch append or no settle")
		}
		lat, elapsed, peak, err = measure(func() ([]time.Duration, error) {
			start := time.Now()
			if err := load(ctx, sys, bt, cfg); err != nil {
				return nil, fmt.Errorf("load: %w", err)
			}
			if err := st.Settle(ctx); err != nil {
				return nil, fmt.Errorf("settle: %w", err)
			}
			return []time.Duration{time.Since(start)}, nil
		})
		if err != nil {
			return res, err
		}
		res.Records = cfg.Count
		res.LogicalBytes = int64(cfg.Count) * int64(16+cfg.ValueSize)
		res.SettledBytes = du(dir)
		if c, ok := sys.(Compacter); ok {
			if err := c.Compact(ctx); err != nil {
				return res, fmt.Errorf("compact: %w", err)
			}
		}
	}
	if err != nil {
		return res, err
	}
	closed = true
	if err := sys.Close(); err != nil {
		return res, fmt.Errorf("close: %w", err)
	}
	if w == "space" {
		res.CompactedBytes = du(dir)
		res.CompactedFileBytes = fileBytes(dir)
	}
	res.Seconds = elapsed.Seconds()
	res.RecordsSec = float64(res.Records) / res.Seconds
	res.P50us, res.P99us, res.P999us = pct(lat, 0.5), pct(lat, 0.99), pct(lat, 0.999)
	res.PeakHeapMB = peak
	return res, nil
}

// ProofBase is how many records the proof workload loads before it proves.
const ProofBase = 1000

// load appends records 0 … cfg.Count-1 in batches of cfg.BatchSize, then
// waits until they are visible to reads where the system needs that.
func load(ctx context.Context, sys System, bt Batcher, cfg Config) error {
	return loadN(ctx, sys, bt, cfg, cfg.Count)
}

// loadN is load of records 0 … n-1.
func loadN(ctx context.Context, sys System, bt Batcher, cfg Config, n int) error {
	err := inBatches(ctx, n, cfg.BatchSize, func(i int) ([]byte, []byte) {
		return Key(uint64(i)), Value(uint64(i), cfg.ValueSize)
	}, bt.PutBatch)
	if err != nil {
		return err
	}
	if v, ok := sys.(Visibler); ok {
		return v.WaitVisible(ctx)
	}
	return nil
}

// loadVersions gives keys 0 … keys-1 HistoryVersions versions each: one
// round over all keys per version, in batches of cfg.BatchSize.
func loadVersions(ctx context.Context, h Historian, keys int, cfg Config) error {
	for v := 0; v < HistoryVersions; v++ {
		err := inBatches(ctx, keys, cfg.BatchSize, func(i int) ([]byte, []byte) {
			return Key(uint64(i)), Value(uint64(v*keys+i), cfg.ValueSize)
		}, h.PutVersions)
		if err != nil {
			return err
		}
	}
	return nil
}

// inBatches calls put with the records kv(0) … kv(n-1), size at a time.
func inBatches(ctx context.Context, n, size int, kv func(i int) (key, value []byte),
	put func(ctx context.Context, keys, values [][]byte) error) error {
	for b := 0; b < n; b += size {
		var keys, vals [][]byte
		for i := b; i < min(n, b+size); i++ {
			k, v := kv(i)
			keys, vals = append(keys, k), append(vals, v)
		}
		if err := put(ctx, keys, vals); err != nil {
			return err
		}
	}
	return nil
}

// wholePass returns the operation of a merge, verify or snapshot workload.
func wholePass(sys System, w string, cfg Config) (func(context.Context) (int, error), bool) {
	switch w {
	case "merge":
		m, ok := sys.(Merger)
		if ok {
			return m.Merge, true
		}
	case "verify":
		v, ok := sys.(Verifier)
		if ok {
			return func(ctx context.Context) (int, error) { return v.Verify(ctx, cfg.verifyThreads()) }, true
		}
	case "snapshot":
		s, ok := sys.(Snapshotter)
		if ok {
			return s.Snapshot, true
		}
	}
	return nil, false
}

// measure runs fn while sampling the heap every 10 ms.
func measure(fn func() ([]time.Duration, error)) ([]time.Duration, time.Duration, float64, error) {
	runtime.GC()
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	start := time.Now()
	lat, err := fn()
	elapsed := time.Since(start)
	close(stop)
	wg.Wait()
	return lat, elapsed, float64(peak.Load()) / (1 << 20), err
}

// parallel runs op(writer, i) for i in [0, n) on the writers, each taking
// the next i, and returns every operation's latency.
func parallel(ctx context.Context, writers, n int, op func(writer int, i uint64) error) ([]time.Duration, error) {
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || ctx.Err() != nil {
					return
				}
				t := time.Now()
				if err := op(w, uint64(i)); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				lat[i] = time.Since(t)
			}
		}()
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return lat, firstErr
}

// pct is the q-quantile of lat in µs (the nearest rank at or below).
func pct(lat []time.Duration, q float64) float64 {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	i := int(q * float64(len(s)-1))
	return float64(s[i].Nanoseconds()) / 1e3
}

// fileBytes is the sum of the sizes of every file under dir.
func fileBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// du is the bytes allocated to every file under dir (what `du` counts:
// blocks, so a preallocated file counts what it holds and a sparse one
// does not), or the files' sizes where the filesystem does not say.
func du(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				if st, ok := info.Sys().(*syscall.Stat_t); ok {
					n += st.Blocks * 512
				} else {
					n += info.Size()
				}
			}
		}
		return nil
	})
	return n
}
