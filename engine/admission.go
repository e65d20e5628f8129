package engine

import "github.com/anchordb/anchordb/engine/internal/admission"

// The bounds on what is in flight and the per-anchor rate limit are
// engine/internal/admission's; the engine computes each append's cost
// (appendEntries, which answers duplicates before admission) and holds
// Close off through its gate.

// admissionConfig is admission's share of o.
func admissionConfig(o *Options) admission.Config {
	return admission.Config{
		MaxRecords: o.MaxInFlightRecords,
		MaxBytes:   o.MaxInFlightBytes,
		PerAnchor:  o.MaxInFlightPerAnchor,
		Rate:       o.AnchorRate,
		Burst:      o.AnchorBurst,
		Clock:      o.Clock,
		Disabled:   o.DisableAdmission,
	}
}

// Refusals counts the appends refused since Open, by code.
type Refusals struct {
	CapacityExhausted uint64 `json:"CAP_001"`
	QueueFull         uint64 `json:"CAP_002"`
	RateLimited       uint64 `json:"CAP_003"`
}

func (db *DB) refusals() Refusals {
	var r Refusals
	r.CapacityExhausted, r.QueueFull, r.RateLimited = db.adm.Counts()
	return r
}
