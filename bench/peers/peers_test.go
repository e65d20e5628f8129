package peers

import (
	"context"
	"testing"

	"github.com/anchordb/anchordb/bench/harness"
)

// TestPeersSmall runs every workload on every system at a tiny size (run it
// with `cd bench/peers && go test ./...`; it is not part of the root
// module's tests).
func TestPeersSmall(t *testing.T) {
	cfg := harness.Config{Writers: 4, ValueSize: 100, Count: 200, BatchSize: 25, Dir: t.TempDir()}
	rs, err := harness.Run(context.Background(), cfg, Openers(), harness.Workloads, nil)
	if err != nil {
		t.Fatal(err)
	}
	ran := map[string]int{}
	for _, r := range rs {
		if r.Skipped == "" {
			if r.Records != cfg.Count || r.RecordsSec <= 0 || r.P50us > r.P999us {
				t.Fatalf("%s on %s: %+v", r.Workload, r.System, r)
			}
			ran[r.System]++
		}
	}
	for _, o := range Openers() {
		if ran[o.Name] < 2 {
			t.Fatalf("%s ran %d workloads", o.Name, ran[o.Name])
		}
	}
}
