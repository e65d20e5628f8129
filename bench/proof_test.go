package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/anchordb/anchordb/bench/harness"
	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"golang.org/x/sys/unix"
)

// BenchmarkTimeToProof: what a client waits for, after an append returned,
// before it holds a signed checkpoint covering the record and the record's
// inclusion proof against it, with checkpoints made on demand
// (harness.ProveAppend: CreateCheckpoint, then ProveInclusion, both checked
// as the client would check them). One writer, one op at a time, over 16
// anchors holding harness.ProofBase records first. After each op the disk's
// own fdatasync is timed on the same filesystem (a 4 KiB write over
// preallocated blocks, then fdatasync: the cheapest durable write there
// is), so the two distributions come from the same minutes. Reports the
// p50 and p99 of both and the ratio of the p99s (the target: at most 4).
func BenchmarkTimeToProof(b *testing.B) {
	proofs, syncs := timeToProof(b, b.N, b.ResetTimer)
	b.StopTimer()
	p99, f99 := quantile(proofs, 0.99), quantile(syncs, 0.99)
	b.ReportMetric(us(quantile(proofs, 0.5)), "proof-p50-us")
	b.ReportMetric(us(p99), "proof-p99-us")
	b.ReportMetric(us(quantile(syncs, 0.5)), "fsync-p50-us")
	b.ReportMetric(us(f99), "fsync-p99-us")
	b.ReportMetric(float64(p99)/float64(f99), "proof/fsync-p99")
}

// timeToProof prepares the database and the probe, calls begin, then runs
// ops appends, each followed by its proof and by one probe of the disk's
// fdatasync, and returns both sets of durations.
func timeToProof(tb testing.TB, ops int, begin func()) (proofs, syncs []time.Duration) {
	ctx := context.Background()
	dir := tb.TempDir()
	db := openWatched(tb, filepath.Join(dir, "db"), engine.Options{})
	ids := AnchorIDs(16)
	warmAnchors(tb, db, ids)
	if err := loadInto(db, len(ids), harness.ProofBase); err != nil {
		tb.Fatal(err)
	}
	if err := db.quiesce(ctx); err != nil {
		tb.Fatal(err)
	}
	signer, verifier, err := proof.GenerateKeys("bench")
	if err != nil {
		tb.Fatal(err)
	}
	probe, err := newSyncProbe(filepath.Join(dir, "probe"))
	if err != nil {
		tb.Fatal(err)
	}
	defer probe.close()
	proofs = make([]time.Duration, ops)
	syncs = make([]time.Duration, ops)
	var buf kvBuf
	begin()
	for i := 0; i < ops; i++ {
		k, v := buf.kv(uint64(harness.ProofBase + i))
		anchor := ids[i%len(ids)]
		r, err := db.Put(ctx, anchor, k, v)
		if err != nil {
			tb.Fatal(err)
		}
		start := time.Now()
		if err := harness.ProveAppend(ctx, db.DB, signer, verifier, anchor, r.Seq); err != nil {
			tb.Fatal(err)
		}
		proofs[i] = time.Since(start)
		if syncs[i], err = probe.once(); err != nil {
			tb.Fatal(err)
		}
	}
	return proofs, syncs
}

// loadInto appends n records (keys from warmKey/2 on, clear of the measured
// ones) in durable batches of up to loadBatch, round-robin over anchors
// anchors.
func loadInto(db engineDB, anchors, n int) error {
	ids := AnchorIDs(anchors)
	bufs := make([]kvBuf, loadBatch)
	var entries []engine.Entry
	for start, batch := 0, 0; start < n; start, batch = start+loadBatch, batch+1 {
		entries = entries[:0]
		for i := start; i < min(start+loadBatch, n); i++ {
			k, v := bufs[i-start].kv(warmKey/2 + uint64(i))
			entries = append(entries, engine.Entry{Anchor: ids[batch%anchors], Type: segment.TypePut, Key: k, Value: v})
		}
		if _, err := db.AppendBatch(context.Background(), entries); err != nil {
			return fmt.Errorf("load: %w", err)
		}
	}
	return nil
}

// syncProbe times the disk's fdatasync: 4 KiB writes over a file already
// written with zeros and synced (so a sync carries data, not a new size),
// each followed by fdatasync.
type syncProbe struct {
	f   *os.File
	off int64
	buf []byte
}

const probeSize = 64 << 20

func newSyncProbe(path string) (*syncProbe, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < probeSize; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros, off); err != nil {
			_ = f.Close()
			return nil, err
		}
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return nil, err
	}
	buf := make([]byte, 4096)
	copy(buf, valuePool)
	return &syncProbe{f: f, buf: buf}, nil
}

// once writes the next 4 KiB and fdatasyncs, and returns how long that took.
func (p *syncProbe) once() (time.Duration, error) {
	start := time.Now()
	if _, err := p.f.WriteAt(p.buf, p.off); err != nil {
		return 0, err
	}
	if err := unix.Fdatasync(int(p.f.Fd())); err != nil {
		return 0, err
	}
	d := time.Since(start)
	p.off = (p.off + int64(len(p.buf))) % probeSize
	return d, nil
}

func (p *syncProbe) close() { _ = p.f.Close() }

// quantile is the q-quantile of ds (nearest rank at or below), 0 for none.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
