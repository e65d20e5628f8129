package engine

import "sync/atomic"

// Metrics counts what the engine has done since Open. The counters only
// grow; read them with Metrics().
type Metrics struct {
	Groups        uint64 `json:"groups"`         // commit groups written to the journal
	Records       uint64 `json:"records"`        // records appended
	JournalSyncs  uint64 `json:"journal_syncs"`  // fdatasyncs of the journal
	JournalBytes  uint64 `json:"journal_bytes"`  // bytes written to the journal
	SegmentWrites uint64 `json:"segment_writes"` // writes of buffered segment bytes
	Seals         uint64 `json:"seals"`          // segments sealed
	Settles       uint64 `json:"settles"`        // settles completed
}

type metrics struct {
	groups, records, journalSyncs, journalBytes, segmentWrites, seals, settles atomic.Uint64
}

// Metrics returns a snapshot of the engine's counters.
func (db *DB) Metrics() Metrics {
	m := &db.metrics
	return Metrics{
		Groups: m.groups.Load(), Records: m.records.Load(),
		JournalSyncs: m.journalSyncs.Load(), JournalBytes: m.journalBytes.Load(),
		SegmentWrites: m.segmentWrites.Load(), Seals: m.seals.Load(), Settles: m.settles.Load(),
	}
}
