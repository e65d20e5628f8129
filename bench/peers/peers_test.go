package peers

import (
	"context"
	"testing"

	"github.com/anchordb/anchordb/bench/harness"
)

// TestPeersSmall runs every workload on every system at a tiny size (run it
// with `cd bench/peers && go test ./...`; it is not part of the root
// module's tests): every system runs the workloads it has the capability
// for, states its configuration, and the proof, space and get-flushed
// workloads run on the peers that take part in them.
func TestPeersSmall(t *testing.T) {
	cfg := harness.Config{Writers: 4, ValueSize: 100, Count: 200, BatchSize: 25, ProofOps: 3, Dir: t.TempDir()}
	rs, err := harness.Run(context.Background(), cfg, Openers(), harness.Workloads, nil)
	if err != nil {
		t.Fatal(err)
	}
	ran := map[string]map[string]bool{}
	for _, r := range rs {
		if r.Skipped != "" {
			continue
		}
		want := cfg.Count
		if r.Workload == "proof" {
			want = cfg.ProofOps
		}
		if r.Records != want || r.RecordsSec <= 0 || r.P50us > r.P999us || r.Config == "" {
			t.Fatalf("%s on %s: %+v", r.Workload, r.System, r)
		}
		if r.Workload == "space" && (r.SettledBytes <= 0 || r.CompactedBytes <= 0) {
			t.Fatalf("space on %s: %+v", r.System, r)
		}
		if ran[r.System] == nil {
			ran[r.System] = map[string]bool{}
		}
		ran[r.System][r.Workload] = true
	}
	for _, o := range Openers() {
		if len(ran[o.Name]) < 2 {
			t.Fatalf("%s ran %d workloads", o.Name, len(ran[o.Name]))
		}
	}
	for sys, ws := range map[string][]string{
		"badger":         {"sync-append", "get", "get-flushed", "history", "space"},
		"immudb":         {"sync-append", "batch-sync", "get", "get-flushed", "history", "space"},
		"immudb-indexed": {"sync-append", "batch-sync"},
		"tessera-posix":  {"sync-append", "batch-sync", "proof", "space"},
	} {
		for _, w := range ws {
			if !ran[sys][w] {
				t.Errorf("%s did not run %s", sys, w)
			}
		}
	}
	if len(ran["immudb-indexed"]) != 2 {
		t.Errorf("immudb-indexed ran %v, want the appends alone", ran["immudb-indexed"])
	}
}
