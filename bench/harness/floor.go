package harness

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/klauspost/compress/zstd"
)

// OpenFloor is the floor of the merge, verify and snapshot workloads: the
// same records as anchordb holds them (anchors, seqs, counters, chained
// hashes) written as plain frames to one file per anchor, and each pass
// reduced to its irreducible work — merge: read every file, parse every
// frame, collect the records and sort them by (counter, anchor id); verify:
// read and parse every frame (its BLAKE3 hash checked) and check each links
// to the one before; snapshot: the state's bytes, laid out as a snapshot
// body and held in memory, through zstd alone. No real engine offers these
// passes, so the floor stands in as their peer, as the Go benchmarks'
// PeerSortMerge, PeerHashOnly and PeerZstdOnly do. It keeps no index, no
// Merkle tree and no durable state, so anchordb's ratio to it is a lower
// bound. It takes part in no other workload.
func OpenFloor(dir string, _ Setup) (System, error) { return &floor{dir: dir}, nil }

type floor struct {
	dir      string
	mu       sync.Mutex
	records  []segment.Record // for the snapshot's state
	anchorOf []uint32         // records[i]'s anchor index
	heads    [Anchors]struct {
		seq  uint64
		hash segment.Hash
	}
	clock uint64
}

func (f *floor) Name() string { return "floor" }

func (f *floor) Configuration() string {
	return "anchordb's records as plain frames, one file per anchor; merge: read, parse (hash checked), sort by (counter, anchor); verify: read, parse, check each link, anchors split over the threads; snapshot: the state's bytes through zstd alone"
}

// FloorWorkloads are the passes the floor is the peer of.
var FloorWorkloads = []string{"merge", "verify", "snapshot"}

func (f *floor) Put(context.Context, int, []byte, []byte) error {
	return errors.New("floor: not an engine")
}

func (f *floor) Close() error { return nil }

func (f *floor) file(a int) string { return filepath.Join(f.dir, anchorID(a)+".frames") }

// PutBatch records the batch as anchordb would: one anchor (that of its
// first key), dense seqs, a chain of hashes, a Lamport counter; the frames
// are appended to the anchor's file (not synced: the floor is not durable).
func (f *floor) PutBatch(_ context.Context, keys, values [][]byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := anchorIndex(keys[0])
	h := &f.heads[a]
	var frames []byte
	for i := range keys {
		f.clock++
		h.seq++
		r := segment.Record{Anchor: anchorID(a), Seq: h.seq, Counter: f.clock,
			Time: int64(f.clock), Type: segment.TypePut, PrevHash: h.hash,
			Key: bytes.Clone(keys[i]), Value: bytes.Clone(values[i])}
		frames = segment.AppendFrame(frames, &r) // sets r.Hash
		h.hash = r.Hash
		f.records = append(f.records, r)
		f.anchorOf = append(f.anchorOf, uint32(a))
	}
	out, err := os.OpenFile(f.file(a), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = out.Write(frames)
	return errors.Join(err, out.Close())
}

// each reads every anchor's file and calls fn with each record parsed (its
// hash checked) and whether it links to the one before.
func (f *floor) each(fn func(r segment.Record, links bool)) error {
	for a := 0; a < Anchors; a++ {
		if err := f.eachOf(a, fn); err != nil {
			return err
		}
	}
	return nil
}

// eachOf is each for anchor a alone.
func (f *floor) eachOf(a int, fn func(r segment.Record, links bool)) error {
	b, err := os.ReadFile(f.file(a))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var prev segment.Hash
	for len(b) > 0 {
		r, n, err := segment.ParseFrame(anchorID(a), b)
		if err != nil {
			return err
		}
		fn(r, r.PrevHash == prev)
		prev, b = r.Hash, b[n:]
	}
	return nil
}

func (f *floor) Merge(context.Context) (int, error) {
	var all []segment.Record
	if err := f.each(func(r segment.Record, _ bool) { all = append(all, r) }); err != nil {
		return 0, err
	}
	slices.SortFunc(all, func(x, y segment.Record) int {
		if c := cmp.Compare(x.Counter, y.Counter); c != 0 {
			return c
		}
		return cmp.Compare(x.Anchor, y.Anchor)
	})
	return len(all), nil
}

// Verify checks every anchor's frames (hash and link) with the anchors
// split over threads goroutines, as anchordb's Verify splits them.
func (f *floor) Verify(_ context.Context, threads int) (int, error) {
	var n, broken atomic.Int64
	var wg sync.WaitGroup
	var next atomic.Int64
	errs := make([]error, Anchors)
	for t := 0; t < max(1, threads); t++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				a := int(next.Add(1) - 1)
				if a >= Anchors {
					return
				}
				var cn, cb int64
				errs[a] = f.eachOf(a, func(_ segment.Record, links bool) {
					cn++
					if !links {
						cb++
					}
				})
				n.Add(cn)
				broken.Add(cb)
			}
		}()
	}
	wg.Wait()
	err := errors.Join(errs...)
	if err == nil && broken.Load() > 0 {
		err = fmt.Errorf("floor: %d records do not link", broken.Load())
	}
	return int(n.Load()), err
}

// Snapshot compresses, per key, its length-prefixed key and value and its
// version (anchor index, seq, counter, time, hash), as snapshot/format.go
// lays an entry out. Every key loaded is distinct, so the state is every
// record.
func (f *floor) Snapshot(context.Context) (int, error) {
	enc, err := zstd.NewWriter(io.Discard, snapshot.EncoderOptions()...)
	if err != nil {
		return 0, err
	}
	be := binary.BigEndian
	var e []byte
	for i := range f.records {
		r := &f.records[i]
		e = be.AppendUint32(e[:0], uint32(len(r.Key)))
		e = append(e, r.Key...)
		e = be.AppendUint32(e, uint32(len(r.Value)))
		e = append(e, r.Value...)
		e = be.AppendUint32(e, f.anchorOf[i])
		e = be.AppendUint64(e, r.Seq)
		e = be.AppendUint64(e, r.Counter)
		e = be.AppendUint64(e, uint64(r.Time))
		e = append(e, r.Hash[:]...)
		if _, err := enc.Write(e); err != nil {
			return 0, err
		}
	}
	return len(f.records), enc.Close()
}
