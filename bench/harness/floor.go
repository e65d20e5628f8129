package harness

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/klauspost/compress/zstd"
)

// OpenFloor is the compute floor of the merge, verify and snapshot
// workloads: the same records as anchordb holds them (anchors, seqs,
// counters, chained hashes), kept in memory, and each pass reduced to its
// irreducible work — merge: collect every record and sort it by (counter,
// anchor id); verify: hash every record's canonical encoding with BLAKE3;
// snapshot: the state's bytes, laid out as a snapshot body, through zstd
// alone. No real engine offers these passes, so the floor stands in as their
// peer (as the Go benchmarks' PeerSortMerge, PeerHashOnly and PeerZstdOnly
// do). It reads nothing from disk, so anchordb's ratio to it is a lower
// bound. It takes part in no other workload.
func OpenFloor(string) (System, error) { return &floor{}, nil }

type floor struct {
	mu      sync.Mutex
	records []segment.Record
	heads   [Anchors]struct {
		seq  uint64
		hash segment.Hash
	}
	clock uint64
}

func (f *floor) Name() string { return "floor" }

// Workloads limits the floor to the passes it is the peer of.
func (f *floor) Workloads() []string { return []string{"merge", "verify", "snapshot"} }

func (f *floor) Put(context.Context, int, []byte, []byte) error {
	return errors.New("floor: not an engine")
}

func (f *floor) Close() error { return nil }

// PutBatch records the batch as anchordb would: one anchor (that of its
// first key), dense seqs, a chain of hashes, a Lamport counter.
func (f *floor) PutBatch(_ context.Context, keys, values [][]byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := binary.BigEndian.Uint64(keys[0][8:]) % Anchors
	h := &f.heads[a]
	for i := range keys {
		f.clock++
		h.seq++
		r := segment.Record{Anchor: fmt.Sprintf("anchor-%02d", a), Seq: h.seq, Counter: f.clock,
			Time: int64(f.clock), Type: segment.TypePut, PrevHash: h.hash,
			Key: bytes.Clone(keys[i]), Value: bytes.Clone(values[i])}
		r.Hash = r.ComputeHash()
		h.hash = r.Hash
		f.records = append(f.records, r)
	}
	return nil
}

func (f *floor) Merge(context.Context) (int, error) {
	all := slices.Clone(f.records)
	slices.SortFunc(all, func(x, y segment.Record) int {
		if c := cmp.Compare(x.Counter, y.Counter); c != 0 {
			return c
		}
		return cmp.Compare(x.Anchor, y.Anchor)
	})
	return len(all), nil
}

func (f *floor) Verify(context.Context) (int, error) {
	for i := range f.records {
		if f.records[i].ComputeHash() != f.records[i].Hash {
			return i, fmt.Errorf("floor: record %d does not hash", i)
		}
	}
	return len(f.records), nil
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
		e = be.AppendUint32(e, uint32(binary.BigEndian.Uint64(r.Key[8:])%Anchors))
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
