package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/klauspost/compress/zstd"
)

// The merged view, snapshots and index rebuilds, each with its peer.
//
//	BenchmarkMerge / BenchmarkPeerSortMerge — 1,000 anchors × 1,000 records,
//	    streamed in merged order vs read from the segment files directly,
//	    parsed (each frame's hash checked), collected and sorted
//	    (slices.SortFunc).
//	BenchmarkSnapshotCreate / BenchmarkPeerZstdOnly — the state of 100,000
//	    keys to a snapshot file vs the same key and value bytes through zstd.
//	BenchmarkRebuildIndex/full and /from-snapshot — dropping and rebuilding
//	    the index of 1,000,000 records (a snapshot at 900,000, a tail of
//	    100,000 after it), every record a key of its own; /keys=100000/…
//	    the same over 100,000 keys, so the snapshot's state is a tenth of
//	    the records before it.

// The merge fixture's anchors and records per anchor (1,000 × 1,000).
func mergeAnchors() int { return sized(1000, 50) }
func mergePer() int     { return sized(1000, 40) }

// loadInterleaved builds a closed database of anchors × per records whose
// counters interleave: each batch holds one record of every anchor, so the
// merged order switches anchor at every record. With snapAt > 0 a snapshot is
// taken after that many records. With keys > 0 record i writes key i mod
// keys; otherwise every record writes a key of its own.
func loadInterleaved(name string, anchors, per, snapAt, keys int) (string, error) {
	name = fmt.Sprintf("%s-%dx%d-snap%d-keys%d", name, anchors, per, snapAt, keys)
	return keptFixture(name, func(dir string) error {
		db, err := engine.Open(dir, engine.Options{NoSync: true})
		if err != nil {
			return err
		}
		ids := AnchorIDs(anchors)
		ctx := context.Background()
		entries := make([]engine.Entry, anchors)
		bufs := make([]kvBuf, anchors)
		n := 0
		for round := 0; round < per; round++ {
			for a := range ids {
				k, v := bufs[a].kv(uint64(n + a))
				if keys > 0 {
					k = Key(bufs[a].k[:], uint64((n+a)%keys))
				}
				entries[a] = engine.Entry{Anchor: ids[a], Type: segment.TypePut, Key: k, Value: v}
			}
			if _, err := db.AppendBatch(ctx, entries); err != nil {
				_ = db.Close()
				return err
			}
			n += anchors
			if snapAt > 0 && n == snapAt {
				if _, err := db.CreateSnapshot(ctx, ""); err != nil {
					_ = db.Close()
					return err
				}
			}
		}
		return db.Close()
	})
}

var mergeFixtures onceBySize[string]

func mergeFixture(tb testing.TB) *engine.DB {
	dir, err := mergeFixtures.get(mergeAnchors()*mergePer(), func(int) (string, error) {
		return loadInterleaved("merge", mergeAnchors(), mergePer(), 0, 0)
	})
	if err != nil {
		tb.Fatal(err)
	}
	db, err := engine.Open(dir, engine.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	return db
}

func BenchmarkMerge(b *testing.B) {
	db := mergeFixture(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	var recs int64
	for i := 0; i < b.N; i++ {
		var last uint64
		for p, err := range db.Merged(ctx, engine.MergedOptions{}) {
			if err != nil {
				b.Fatal(err)
			}
			if p.Record.Counter < last {
				b.Fatal("merged order goes back")
			}
			last = p.Record.Counter
			recs++
		}
	}
	b.ReportMetric(float64(recs)/b.Elapsed().Seconds(), "records/s")
}

func BenchmarkPeerSortMerge(b *testing.B) {
	db := mergeFixture(b)
	dir := db.Dir()
	var ids []string
	for info, err := range db.Anchors(context.Background()) {
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, info.ID)
	}
	// The database stays open (as for Merge), but the peer reads its
	// segment files itself.
	b.ReportAllocs()
	b.ResetTimer()
	var recs int64
	for i := 0; i < b.N; i++ {
		all, err := sortMergeFiles(dir, ids)
		if err != nil {
			b.Fatal(err)
		}
		recs += int64(len(all))
	}
	b.ReportMetric(float64(recs)/b.Elapsed().Seconds(), "records/s")
}

// sortMergeFiles reads every segment file of the anchors ids under dir,
// parses every frame (segment.ParseFrame checks its hash), and sorts the
// records by (counter, anchor id): the merged order, collected and sorted.
func sortMergeFiles(dir string, ids []string) ([]segment.Record, error) {
	var all []segment.Record
	var data []byte
	for _, a := range ids {
		id := segment.AnchorPathID(a)
		files, err := filepath.Glob(filepath.Join(dir, segment.AnchorsDir, id[:2], id[2:], "*.seg"))
		if err != nil {
			return nil, err
		}
		slices.Sort(files)
		for _, f := range files {
			if data, err = readInto(data, f); err != nil {
				return nil, err
			}
			sc, err := segment.NewScanner(bytes.NewReader(data), int64(len(data)))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			for {
				fr, err := sc.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return nil, fmt.Errorf("%s: %w", f, err)
				}
				rec, _, err := segment.ParseFrame(a, data[fr.Offset:fr.Offset+int64(fr.Size)])
				if err != nil {
					return nil, fmt.Errorf("%s: %w", f, err)
				}
				all = append(all, rec)
			}
		}
	}
	slices.SortFunc(all, func(x, y segment.Record) int {
		if x.Counter != y.Counter {
			if x.Counter < y.Counter {
				return -1
			}
			return 1
		}
		return strings.Compare(x.Anchor, y.Anchor)
	})
	return all, nil
}

// readInto reads the file at path into buf's storage (grown as needed).
func readInto(buf []byte, path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return buf, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return buf, err
	}
	buf = slices.Grow(buf[:0], int(info.Size()))[:info.Size()]
	_, err = io.ReadFull(f, buf)
	return buf, err
}

const snapshotKeys = 100_000

var snapshotFixtures onceBySize[string]

func snapshotFixture(tb testing.TB) *engine.DB {
	dir, err := snapshotFixtures.get(snapshotKeys, func(n int) (string, error) {
		return loadInterleaved("snapshot", 100, n/100, 0, 0)
	})
	if err != nil {
		tb.Fatal(err)
	}
	db, err := engine.Open(dir, engine.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	return db
}

// BenchmarkSnapshotCreate/durable is CreateSnapshot as it runs: the file is
// fsynced, renamed into place and its directory fsynced. /in-memory writes
// the same snapshot through the same code to an in-memory filesystem, which
// leaves out the disk: the fair comparison with zstd alone, which writes
// nothing anywhere.
func BenchmarkSnapshotCreate(b *testing.B) {
	db := snapshotFixture(b)
	ctx := context.Background()
	for _, mode := range []string{"durable", "in-memory"} {
		b.Run(mode, func(b *testing.B) {
			var recs, raw int64
			for i := 0; i < b.N; i++ {
				var info snapshot.Info
				var err error
				if mode == "durable" {
					info, err = db.CreateSnapshot(ctx, "")
				} else {
					info, err = db.CreateSnapshotTo(ctx, vfs.NewMem(), "snaps", "")
				}
				if err != nil {
					b.Fatal(err)
				}
				if mode == "durable" {
					b.StopTimer()
					if err := snapshot.Delete(db.FS(), info.Path); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				recs += int64(info.Entries)
				raw += int64(info.RawSize)
			}
			b.ReportMetric(float64(recs)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(float64(raw)/1e6/b.Elapsed().Seconds(), "MB/s")
		})
	}
}

func BenchmarkPeerZstdOnly(b *testing.B) {
	db := snapshotFixture(b)
	ctx := context.Background()
	// The same state bytes the snapshot's body holds, gathered outside the
	// timer: per key its length-prefixed key and value and its version (the
	// receipt and time: 8+8+8+32 bytes, with a 4-byte anchor index), laid out
	// as snapshot/format.go lays them out.
	var state [][]byte
	anchorIdx := map[string]uint32{}
	for v, err := range db.Scan(ctx, nil) {
		if err != nil {
			b.Fatal(err)
		}
		if _, ok := anchorIdx[v.Anchor]; !ok {
			anchorIdx[v.Anchor] = uint32(len(anchorIdx))
		}
		e := be.AppendUint32(nil, uint32(len(v.Key)))
		e = append(e, v.Key...)
		e = be.AppendUint32(e, uint32(len(v.Value)))
		e = append(e, v.Value...)
		e = be.AppendUint32(e, anchorIdx[v.Anchor])
		e = be.AppendUint64(e, v.Seq)
		e = be.AppendUint64(e, v.Counter)
		e = be.AppendUint64(e, uint64(v.Time.UnixNano()))
		e = append(e, v.Hash[:]...)
		state = append(state, e)
	}
	b.ResetTimer()
	var recs, raw int64
	for i := 0; i < b.N; i++ {
		enc, err := zstd.NewWriter(io.Discard, snapshot.EncoderOptions()...)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range state {
			_, _ = enc.Write(p)
			raw += int64(len(p))
		}
		if err := enc.Close(); err != nil {
			b.Fatal(err)
		}
		recs += int64(len(state))
	}
	b.ReportMetric(float64(recs)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(raw)/1e6/b.Elapsed().Seconds(), "MB/s")
}

const (
	// rebuildKeys is the number of keys of the second rebuild fixture.
	rebuildKeys = 100_000
)

// rebuildRecords is the rebuild fixtures' records (1,000,000 over 1,000
// anchors, a snapshot at nine tenths).
func rebuildRecords() int { return sized(1_000_000, 20_000) }

var rebuildFixtures onceBySize[string]

// BenchmarkRebuildIndex: RebuildIndexWith on a closed database, from the
// newest snapshot (the state at its frontier, the records after it
// replayed) or in full. The full rebuild replays every record through the
// recovery path (reconcile: rows applied through the index's memtable),
// which is not the path the snapshot rebuild writes its tables through
// (sorted tables ingested): a replay through the same path needs an engine
// option the engine does not have yet (docs/PERFORMANCE.md says so).
func BenchmarkRebuildIndex(b *testing.B) {
	// The unique-key fixture is the target's case: its snapshot holds a
	// version of every record before it, so a rebuild from the snapshot
	// writes as many rows as a full replay.
	benchmarkRebuild(b, 0)
	b.Run(fmt.Sprintf("keys=%d", rebuildKeys), func(b *testing.B) { benchmarkRebuild(b, rebuildKeys) })
}

func benchmarkRebuild(b *testing.B, keys int) {
	n := rebuildRecords()
	for _, fromSnapshot := range []bool{false, true} {
		name := "full"
		if fromSnapshot {
			name = "from-snapshot"
		}
		b.Run(name, func(b *testing.B) {
			dir, err := rebuildFixtures.get(keys, func(int) (string, error) {
				return loadInterleaved("rebuild", 1000, n/1000, n*9/10, keys)
			})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				plan, err := engine.RebuildIndexWith(ctx, dir, engine.Options{}, engine.RebuildOptions{Apply: true, FromSnapshot: fromSnapshot})
				if err != nil {
					b.Fatal(err)
				}
				for _, ev := range plan.Report.Events {
					if ev.Kind == engine.EventFastRebuildAbandoned {
						b.Fatalf("the fast path was abandoned: %v", ev)
					}
				}
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// TestViewWorkloads runs the bodies of the view benchmarks once on a small
// database, so they cannot rot between benchmark runs.
func TestViewWorkloads(t *testing.T) {
	dir, err := loadInterleaved("views-small", 20, 30, 400, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	db, err := engine.Open(dir, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var merged []engine.Record
	for p, err := range db.Merged(ctx, engine.MergedOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		merged = append(merged, p.Record)
	}
	if len(merged) != 600 {
		t.Fatalf("merged %d records, want 600", len(merged))
	}
	// The sort-merge peer, reading the segment files itself, finds the
	// same records in the same order.
	sorted, err := sortMergeFiles(dir, AnchorIDs(20))
	if err != nil {
		t.Fatal(err)
	}
	if len(sorted) != len(merged) {
		t.Fatalf("the peer read %d records, the merge %d", len(sorted), len(merged))
	}
	for i := range sorted {
		if sorted[i].Anchor != merged[i].Anchor || sorted[i].Seq != merged[i].Seq || sorted[i].Hash != merged[i].Hash {
			t.Fatalf("position %d: the peer has %s #%d, the merge %s #%d", i, sorted[i].Anchor, sorted[i].Seq, merged[i].Anchor, merged[i].Seq)
		}
	}
	if _, err := db.CreateSnapshot(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, fast := range []bool{false, true} {
		plan, err := engine.RebuildIndexWith(ctx, dir, engine.Options{}, engine.RebuildOptions{Apply: true, FromSnapshot: fast})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range plan.Report.Events {
			if ev.Kind == engine.EventFastRebuildAbandoned {
				t.Fatalf("fast path abandoned: %v", ev)
			}
		}
	}
}
