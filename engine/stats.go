package engine

import (
	"context"
	"iter"
	"strings"
	"time"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
)

// AnchorInfo describes one anchor log.
type AnchorInfo struct {
	ID          string       `json:"anchor"`
	Records     uint64       `json:"records"` // the head seq
	HeadHash    segment.Hash `json:"head_hash"`
	LastCounter uint64       `json:"last_counter"`
	Segments    uint64       `json:"segments"` // number of the active segment
	Damage      string       `json:"damage,omitempty"`
}

// Anchors lists every anchor with at least one record, in byte order of id.
func (db *DB) Anchors(ctx context.Context) iter.Seq2[AnchorInfo, error] {
	return func(yield func(AnchorInfo, error) bool) {
		if err := db.beginRead(ctx); err != nil {
			yield(AnchorInfo{}, err)
			return
		}
		defer db.endRead()
		ids, err := db.anchorIDs()
		if err != nil {
			yield(AnchorInfo{}, err)
			return
		}
		for _, id := range ids {
			if err := ctx.Err(); err != nil {
				yield(AnchorInfo{}, err)
				return
			}
			info, ok, err := db.anchorInfo(id)
			if err != nil {
				yield(AnchorInfo{}, err)
				return
			}
			if ok && !yield(info, nil) {
				return
			}
		}
	}
}

// AnchorInfo returns one anchor's head; ok is false when it has no records.
// Like every read it first waits for the appends acknowledged before it to
// be applied, a wait the applier always ends (by applying them, failing, or
// stopping at Close).
func (db *DB) AnchorInfo(ctx context.Context, id string) (AnchorInfo, bool, error) {
	if err := db.beginRead(ctx); err != nil {
		return AnchorInfo{}, false, err
	}
	defer db.endRead()
	return db.anchorInfo(id)
}

// anchorInfo is AnchorInfo for callers that have waited for visibility
// themselves, with their own context.
func (db *DB) anchorInfo(id string) (AnchorInfo, bool, error) {
	a, err := db.getAnchor(id, false)
	if err != nil || a == nil {
		return AnchorInfo{}, false, err
	}
	st := a.snapshot()
	info := AnchorInfo{ID: id, Records: st.head, HeadHash: st.headHash, LastCounter: st.lastCounter, Segments: st.segno}
	if d := a.damaged(); d != nil {
		info.Damage = d.Error()
	}
	return info, st.head > 0 || info.Damage != "", nil
}

// anchorIDs returns the ids of every anchor the index knows, in byte order.
func (db *DB) anchorIDs() ([]string, error) {
	it, err := db.index.NewIter(&pebble.IterOptions{LowerBound: []byte{schema.TagAnchor}, UpperBound: []byte{schema.TagAnchor + 1}})
	if err != nil {
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "index iterator")
	}
	defer it.Close()
	var ids []string
	for ok := it.First(); ok; ok = it.Next() {
		ids = append(ids, string(it.Key()[1:]))
	}
	return ids, ioErr(it.Error(), "read index")
}

// Stats describes the database.
type Stats struct {
	Dir            string `json:"dir"`
	ID             string `json:"id"`
	Durability     string `json:"durability"`
	Anchors        uint64 `json:"anchors"`
	Records        uint64 `json:"records"`
	DamagedAnchors uint64 `json:"damaged_anchors"`
	SegmentFiles   uint64 `json:"segment_files"`
	SegmentBytes   int64  `json:"segment_bytes"`
	// IndexBytes is the index's files on disk. Its rows reach them when a
	// memtable is flushed (a settle, Close): on a database open and
	// written to since, rows still in memory are not counted.
	IndexBytes      uint64 `json:"index_bytes"`
	InFlightRecords int    `json:"in_flight_records"`
	InFlightBytes   int64  `json:"in_flight_bytes"`
	OpenFiles       int    `json:"open_segment_files"`
	Clock           uint64 `json:"clock"`
	// Snapshots counts the database's snapshots: those compaction counts
	// (the audit log records them with the hashes their bytes have, and
	// their frontiers are the log's), not every file in snapshots/.
	Snapshots int `json:"snapshots"`
	// RecordsUnsnapshotted counts the records after the newest snapshot's
	// frontier; OldestUnsnapshottedAge is the age of the oldest of them (0
	// when there is none). It is never negative: when that record is dated
	// after now (the clock went back, or the date is wrong) its age is
	// unknown, the age is 0 and OldestUnsnapshottedAfterNow is set — the
	// case a compaction plan notes, and takes every_seconds as due for.
	RecordsUnsnapshotted        uint64        `json:"records_unsnapshotted"`
	OldestUnsnapshottedAge      time.Duration `json:"oldest_unsnapshotted_age_ns"`
	OldestUnsnapshottedAfterNow bool          `json:"oldest_unsnapshotted_after_now"`
	Metrics                     Metrics       `json:"metrics"`
}

// Stats counts anchors, records and bytes. It walks the segment directories,
// so it costs a directory listing per anchor. Of snapshots/ it counts the
// files the audit log records, by the hashes their footers claim, without
// reading them whole: Stats deletes nothing, and compaction, which does,
// hashes every byte first.
func (db *DB) Stats(ctx context.Context) (Stats, error) {
	if err := db.beginRead(ctx); err != nil {
		return Stats{}, err
	}
	defer db.endRead()
	// Count segment bytes still in the write buffers as written.
	if err := db.flushAllBuffers(); err != nil {
		return Stats{}, err
	}
	s := Stats{Dir: db.dir, ID: db.id, Durability: db.opts.DurabilityMode(), Clock: db.clock.Load(), OpenFiles: db.files.open()}
	s.InFlightRecords, s.InFlightBytes = db.adm.InFlight()
	for info, err := range db.Anchors(ctx) {
		if err != nil {
			return s, err
		}
		s.Anchors++
		s.Records += info.Records
		if info.Damage != "" {
			s.DamagedAnchors++
		}
		dir := segment.AnchorDir(db.fs, db.dir, info.ID)
		names, err := fsutil.List(db.fs, dir) // NB: not fs.List: that of a FIFO blocks
		if err != nil {
			continue
		}
		for _, n := range names {
			if !strings.HasSuffix(n, ".seg") {
				continue
			}
			if st, err := db.fs.Stat(db.fs.PathJoin(dir, n)); err == nil {
				s.SegmentFiles++
				s.SegmentBytes += st.Size()
			}
		}
	}
	m := db.index.Metrics()
	s.IndexBytes = m.DiskSpaceUsage()
	s.Metrics = db.Metrics()
	// What the newest snapshot does not cover (the retention triggers),
	// counting only the database's snapshots, as compaction does.
	counted, err := db.countSnapshots(ctx, checkClaims)
	if err != nil {
		return s, err
	}
	snaps := counted.list
	for _, si := range snaps {
		if si.Err == nil {
			s.Snapshots++
		}
	}
	since, _, err := db.unsnapshotted(ctx, snaps)
	if err != nil {
		return s, err
	}
	s.RecordsUnsnapshotted = since.RecordsSinceSnapshot
	if t := since.OldestUnsnapshotted; !t.IsZero() && s.RecordsUnsnapshotted > 0 {
		// NB: a record dated after now gave a negative age, which reads
		// as "none yet" or as nonsense; how long ago it was is unknown.
		if now := db.opts.Clock(); t.After(now) {
			s.OldestUnsnapshottedAfterNow = true
		} else {
			s.OldestUnsnapshottedAge = now.Sub(t)
		}
	}
	return s, nil
}
