package main

import (
	"github.com/spf13/pflag"
)

var statsCmd = &command{
	name:    "stats",
	summary: "print sizes, anchors, records, snapshots, unsnapshotted records, durability mode and what the last open recovered",
	detail: `With --json one object: the engine's statistics (dir, id, durability, anchors, records,
damaged_anchors, segment_files, segment_bytes, index_bytes, in_flight_records,
in_flight_bytes, open_segment_files, clock, snapshots, records_unsnapshotted,
oldest_unsnapshotted_age_ns (0 when the oldest is dated after now; then
oldest_unsnapshotted_after_now is true), metrics: the engine's counters since this open — groups,
records, journal syncs and bytes, segment writes, seals, settles, duplicates, refusals by
code, group_records_p50/p99 and sync_latency_p50/p99_ns), "damaged": the read-only anchors and why,
and "recovery": what this command's open found ({"clean","rebuilt","events"}).`,
	minArgs: 0, maxArgs: 0,
	setup: func(fs *pflag.FlagSet) runFunc {
		return func(e *env, _ []string) error {
			db, err := e.openRead()
			if err != nil {
				return err
			}
			st, err := db.Stats(e.ctx)
			if err != nil {
				return err
			}
			out := statsReport{stats: st, recovery: db.RecoveryReport()}
			if st.DamagedAnchors > 0 {
				for info, err := range db.Anchors(e.ctx) {
					if err != nil {
						return err
					}
					if info.Damage != "" {
						out.damaged = append(out.damaged, damagedAnchor{Anchor: info.ID, Damage: info.Damage})
					}
				}
			}
			e.print.Stats(out)
			return nil
		}
	},
}
