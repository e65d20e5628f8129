package main

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/anchordb/anchordb/engine"
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
			out := statsJSON{Stats: st, Damaged: []damagedJSON{}, Recovery: newRecoveryJSON(db.RecoveryReport())}
			if st.DamagedAnchors > 0 {
				for info, err := range db.Anchors(e.ctx) {
					if err != nil {
						return err
					}
					if info.Damage != "" {
						out.Damaged = append(out.Damaged, damagedJSON{Anchor: info.ID, Damage: info.Damage})
					}
				}
			}
			if e.g.json {
				e.out.json(out)
				return nil
			}
			printStatsHuman(e, out)
			return nil
		}
	},
}

type statsJSON struct {
	engine.Stats
	Damaged  []damagedJSON `json:"damaged"`
	Recovery recoveryJSON  `json:"recovery"`
}

type damagedJSON struct {
	Anchor string `json:"anchor"`
	Damage string `json:"damage"`
}

// recoveryJSON is engine.RecoveryReport with its errors in the CLI's error
// shape.
type recoveryJSON struct {
	Clean   bool                `json:"clean"`
	Rebuilt bool                `json:"rebuilt"`
	Events  []recoveryEventJSON `json:"events"`
}

type recoveryEventJSON struct {
	Kind    string     `json:"kind"`
	Anchor  string     `json:"anchor,omitempty"`
	File    string     `json:"file,omitempty"`
	Offset  int64      `json:"offset,omitempty"`
	Bytes   int64      `json:"bytes,omitempty"`
	Records uint64     `json:"records,omitempty"`
	Saved   string     `json:"saved,omitempty"`
	Error   *errorBody `json:"error,omitempty"`
}

func newRecoveryJSON(r engine.RecoveryReport) recoveryJSON {
	out := recoveryJSON{Clean: r.Clean, Rebuilt: r.Rebuilt, Events: []recoveryEventJSON{}}
	for _, ev := range r.Events {
		j := recoveryEventJSON{Kind: ev.Kind, Anchor: ev.Anchor, File: ev.File, Offset: ev.Offset,
			Bytes: ev.Bytes, Records: ev.Records, Saved: ev.Saved}
		if ev.Err != nil {
			b := errorJSON(ev.Err).Error
			j.Error = &b
		}
		out.Events = append(out.Events, j)
	}
	return out
}

func printStatsHuman(e *env, s statsJSON) {
	rows := []struct {
		name  string
		value any
	}{
		{"dir", s.Dir},
		{"id", s.ID},
		{"durability", s.Durability},
		{"anchors", s.Anchors},
		{"records", s.Records},
		{"damaged anchors", s.DamagedAnchors},
		{"segment files", s.SegmentFiles},
		{"segment bytes", fmt.Sprintf("%d (%s)", s.SegmentBytes, humanBytes(s.SegmentBytes))},
		{"index bytes", fmt.Sprintf("%d (%s)", s.IndexBytes, humanBytes(int64(s.IndexBytes)))},
		{"in flight", fmt.Sprintf("%s, %d bytes", plural(s.InFlightRecords, "record"), s.InFlightBytes)},
		{"open segment files", s.OpenFiles},
		{"clock", s.Clock},
		{"snapshots", s.Snapshots},
		{"unsnapshotted", unsnapshottedText(s.Stats)},
		{"since open", fmt.Sprintf("%s in %s, %s, %s of journal, %s, %s, %s",
			plural(s.Metrics.Records, "record"), plural(s.Metrics.Groups, "commit group"), plural(s.Metrics.JournalSyncs, "journal sync"), humanBytes(int64(s.Metrics.JournalBytes)),
			plural(s.Metrics.SegmentWrites, "segment write"), plural(s.Metrics.Seals, "seal"), plural(s.Metrics.Settles, "settle"))},
		{"commit groups", fmt.Sprintf("records a group p50 %d, p99 %d (bucket bounds); journal fdatasync p50 %s, p99 %s",
			s.Metrics.GroupRecordsP50, s.Metrics.GroupRecordsP99, s.Metrics.SyncLatencyP50, s.Metrics.SyncLatencyP99)},
		{"duplicates", s.Metrics.Duplicates},
		{"refused", fmt.Sprintf("CAP_001 %d, CAP_002 %d, CAP_003 %d", s.Metrics.Refusals.CapacityExhausted,
			s.Metrics.Refusals.QueueFull, s.Metrics.Refusals.RateLimited)},
		{"last close", map[bool]string{true: "clean", false: "unclean (recovery ran)"}[s.Recovery.Clean]},
	}
	for _, r := range rows {
		e.out.linef("%-19s %v", r.name+":", r.value)
	}
	if s.Recovery.Rebuilt {
		e.out.linef("%-19s %s", "index:", "rebuilt from the segments")
	}
	for _, d := range s.Damaged {
		e.out.linef("%-19s %s: %s", "damaged:", display([]byte(d.Anchor)), d.Damage)
	}
	for _, ev := range s.Recovery.Events {
		line := ev.Kind
		if ev.Anchor != "" {
			line += " anchor=" + display([]byte(ev.Anchor))
		}
		if ev.File != "" {
			line += fmt.Sprintf(" file=%s offset=%d", ev.File, ev.Offset)
		}
		if ev.Error != nil {
			line += ": " + ev.Error.Code + " " + ev.Error.Message
		}
		e.out.linef("%-19s %s", "recovery:", line)
	}
}

// unsnapshottedText describes the records after the newest snapshot.
func unsnapshottedText(s engine.Stats) string {
	if s.RecordsUnsnapshotted == 0 {
		return "0 records"
	}
	if s.OldestUnsnapshottedAfterNow {
		return fmt.Sprintf("%s, the oldest dated after now (the clock went back, or its date is wrong): its age is unknown", plural(s.RecordsUnsnapshotted, "record"))
	}
	return fmt.Sprintf("%s, the oldest %s old", plural(s.RecordsUnsnapshotted, "record"), s.OldestUnsnapshottedAge.Round(time.Millisecond))
}

// humanBytes renders a byte count in binary units.
func humanBytes(n int64) string {
	const unit = 1024
	if n < 0 { // a difference: stubs larger than the segments they replace
		return "-" + humanBytes(-n)
	}
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// netText says what a compaction freed: removed bytes less the stubs
// written in their place, which can be more (small segments whose records
// the stubs keep).
func netText(n int64) string {
	if n < 0 {
		return humanBytes(-n) + " more than before"
	}
	return humanBytes(n) + " freed"
}

// dirBytes sums the sizes of the regular files under dir.
func dirBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	return n, err
}
