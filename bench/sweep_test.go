package bench

import (
	"fmt"
	"testing"

	"github.com/anchordb/anchordb/engine"
	"github.com/cockroachdb/pebble/v2"
)

// The sweeps: durable appends (as AppendSync, 16 anchors) with the writers
// and the value size varied one at a time, beside the same Pebble peer
// (the index's options) doing the same: writers 1, 4, 64 and 256 with
// 100-byte values; values of 100 B, 1 KiB, 16 KiB and 1 MiB with 64
// writers. Values other than 100 bytes are windows of a 4 MiB
// pseudo-random pool (ValueN): they do not compress. bench/ratios.sh runs
// each point with a record count that keeps a sample near a few seconds.

// sweepPoints are the (writers, value size) points of the sweeps.
var sweepPoints = [][2]int{{1, 100}, {4, 100}, {64, 100}, {256, 100}, {64, 1 << 10}, {64, 16 << 10}, {64, 1 << 20}}

func sweep(b *testing.B, w func(writers, valueSize int) workload) {
	for _, writers := range []int{1, 4, 64, 256} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			for _, p := range sweepPoints {
				if p[0] == writers {
					b.Run(fmt.Sprintf("value=%d", p[1]), func(b *testing.B) { run(b, w(p[0], p[1])) })
				}
			}
		})
	}
}

func BenchmarkSweepSync(b *testing.B) {
	sweep(b, func(writers, valueSize int) workload {
		return appendPuts(writers, 16, valueSize, engine.Options{})
	})
}

func BenchmarkSweepPeerPebbleSync(b *testing.B) {
	sweep(b, func(writers, valueSize int) workload {
		return peerSet(writers, 16, valueSize, tunedPebble, pebble.Sync)
	})
}
