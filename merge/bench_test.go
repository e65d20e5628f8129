package merge

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/anchordb/anchordb/segment"
)

const (
	benchSources = 1000
	benchRecords = 1000 // per source
)

var benchLogs = sync.OnceValue(func() [][]segment.Record {
	rng := rand.New(rand.NewPCG(1, 2))
	logs := make([][]segment.Record, benchSources)
	for i := range logs {
		a := fmt.Sprintf("device-%04d", i)
		recs := make([]segment.Record, benchRecords)
		var c uint64
		for j := range recs {
			// Lamport-like counters: every anchor advances by about the number
			// of anchors per record, with ties across anchors.
			c += 1 + rng.Uint64N(2*benchSources)
			recs[j] = segment.Record{Anchor: a, Seq: uint64(j + 1), Counter: c, Type: segment.TypePut,
				Key: []byte("key"), Value: []byte("value")}
		}
		logs[i] = recs
	}
	return logs
})

// BenchmarkMerge streams 1,000 in-memory sources of 1,000 records each through
// the k-way merge.
func BenchmarkMerge(b *testing.B) {
	logs := benchLogs()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n := 0
		var last uint64
		for p, err := range Merge(context.Background(), sources(logs)) {
			if err != nil {
				b.Fatal(err)
			}
			last = p.Record.Counter
			n++
		}
		if n != benchSources*benchRecords || last == 0 {
			b.Fatalf("merged %d", n)
		}
	}
	b.ReportMetric(float64(b.N*benchSources*benchRecords)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkPeerSortMerge is the obvious alternative: read every record into
// memory and sort. It needs memory proportional to the whole log.
func BenchmarkPeerSortMerge(b *testing.B) {
	logs := benchLogs()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var all []segment.Record
		for _, src := range sources(logs) {
			for {
				r, ok, err := src.Next()
				if err != nil {
					b.Fatal(err)
				}
				if !ok {
					break
				}
				all = append(all, r)
			}
		}
		slices.SortFunc(all, Compare)
		if len(all) != benchSources*benchRecords {
			b.Fatalf("sorted %d", len(all))
		}
	}
	b.ReportMetric(float64(b.N*benchSources*benchRecords)/b.Elapsed().Seconds(), "records/s")
}
