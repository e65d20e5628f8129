package engine

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Metrics counts what the engine has done since Open. The counters only
// grow; read them with Metrics().
type Metrics struct {
	Groups        uint64   `json:"groups"`         // commit groups written to the journal
	Records       uint64   `json:"records"`        // records appended
	JournalSyncs  uint64   `json:"journal_syncs"`  // fdatasyncs of the journal
	JournalBytes  uint64   `json:"journal_bytes"`  // bytes of journal blocks written (not its preallocated zeros)
	SegmentWrites uint64   `json:"segment_writes"` // writes of buffered segment bytes
	Seals         uint64   `json:"seals"`          // segments sealed
	Settles       uint64   `json:"settles"`        // settles completed
	Duplicates    uint64   `json:"duplicates"`     // appends answered with an original receipt
	Refusals      Refusals `json:"refusals"`       // appends refused by admission, by code
	// DescriptorWaits counts the tries of an open that found no file
	// descriptor free (EMFILE) and waited for one (fdbudget.go).
	DescriptorWaits uint64 `json:"descriptor_waits"`
	// Records per commit group and journal fdatasync latency, as
	// percentiles of power-of-two buckets (the value is the bucket's upper
	// bound, so p99 = 64 means 33–64).
	GroupRecordsP50 uint64        `json:"group_records_p50"`
	GroupRecordsP99 uint64        `json:"group_records_p99"`
	SyncLatencyP50  time.Duration `json:"sync_latency_p50_ns"`
	SyncLatencyP99  time.Duration `json:"sync_latency_p99_ns"`
}

type metrics struct {
	groups, records, journalSyncs, journalBytes, segmentWrites, seals, settles, duplicates atomic.Uint64
	fdWaits                                                                                atomic.Uint64
	groupRecords, syncMicros                                                               histogram
}

// histogram counts values in power-of-two buckets: bucket i holds values v
// with bits.Len64(v) == i. Recording is one atomic add.
type histogram struct{ b [65]atomic.Uint64 }

func (h *histogram) record(v uint64) { h.b[bits.Len64(v)].Add(1) }

// quantile returns the upper bound of the bucket holding the q-quantile, or
// 0 when nothing was recorded.
func (h *histogram) quantile(q float64) uint64 {
	var counts [65]uint64
	var total uint64
	for i := range h.b {
		counts[i] = h.b[i].Load()
		total += counts[i]
	}
	if total == 0 {
		return 0
	}
	rank := uint64(q*float64(total-1)) + 1
	var seen uint64
	for i, c := range counts {
		seen += c
		if seen >= rank {
			if i == 0 {
				return 0
			}
			return 1<<i - 1
		}
	}
	return 0
}

// Metrics returns a snapshot of the engine's counters.
func (db *DB) Metrics() Metrics {
	m := &db.metrics
	return Metrics{
		Groups: m.groups.Load(), Records: m.records.Load(),
		JournalSyncs: m.journalSyncs.Load(), JournalBytes: m.journalBytes.Load(),
		SegmentWrites: m.segmentWrites.Load(), Seals: m.seals.Load(), Settles: m.settles.Load(),
		Duplicates: m.duplicates.Load(), Refusals: db.refusals(), DescriptorWaits: m.fdWaits.Load(),
		GroupRecordsP50: m.groupRecords.quantile(0.5), GroupRecordsP99: m.groupRecords.quantile(0.99),
		SyncLatencyP50: time.Duration(m.syncMicros.quantile(0.5)) * time.Microsecond,
		SyncLatencyP99: time.Duration(m.syncMicros.quantile(0.99)) * time.Microsecond,
	}
}
