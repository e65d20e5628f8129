package bench

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestWorkloads runs every benchmark body once at a small size, so the
// benchmarks keep compiling and working under `go test ./bench/` (part of
// `make test`) without the cost of a benchmark run.
func TestWorkloads(t *testing.T) {
	const getN = 2000
	cases := []struct {
		name string
		w    workload
		ops  int
		recs int64
	}{
		{"AppendSync", appendSync(8, 5), 100, 100},
		{"AppendSyncNoAdmission", appendSyncNoAdmission(8, 5), 100, 100},
		{"AppendBatchSync", appendBatchSync(50), 3, 150},
		{"AppendNoSync", appendNoSync(1, 4), 100, 100},
		{"Get", get(getN, true), getN + 10, getN + 10},
		{"PeerPebbleSync", peerSet(8, pebble.Sync), 100, 100},
		{"PeerPebbleBatchSync", peerBatchSync(50), 3, 150},
		{"PeerPebbleNoSync", peerSet(1, pebble.NoSync), 100, 100},
		{"PeerPebbleGet", peerGet(getN, true), getN + 10, getN + 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fn := c.w(t)
			recs, err := fn(c.ops)
			if err != nil {
				t.Fatal(err)
			}
			if recs != c.recs {
				t.Fatalf("%d ops reported %d records, want %d", c.ops, recs, c.recs)
			}
		})
	}
}

func TestWorkloadShape(t *testing.T) {
	var a, b kvBuf
	seen := make(map[string]bool)
	for i := uint64(0); i < 10_000; i++ {
		k, v := a.kv(i)
		if len(k) != KeySize || len(v) != ValueSize {
			t.Fatalf("key %d: %d/%d bytes", i, len(k), len(v))
		}
		if seen[string(k)] {
			t.Fatalf("key %d repeats", i)
		}
		seen[string(k)] = true
		k2, v2 := b.kv(i)
		if string(k2) != string(k) || string(v2) != string(v) {
			t.Fatalf("key %d is not deterministic", i)
		}
	}
	for _, n := range []int{1, 2, 7, 1000, 2000, 1_000_000} {
		o := NewOrder(n)
		hit := make([]bool, n)
		for i := 0; i < n; i++ {
			j := o.At(i)
			if hit[j] {
				t.Fatalf("order of %d visits %d twice", n, j)
			}
			hit[j] = true
		}
		if n > 2 && o.At(1) == 1 {
			t.Fatalf("order of %d is the identity", n)
		}
	}
}

func TestParallelDividesWork(t *testing.T) {
	for _, n := range []int{0, 1, 63, 64, 1000} {
		got := make([]int32, n)
		err := Parallel(n, 64, func(_, i int) error {
			got[i]++ // each index is taken by exactly one goroutine
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range got {
			if c != 1 {
				t.Fatalf("n=%d: index %d ran %d times", n, i, c)
			}
		}
	}
}

// TestRatios checks ratios.sh against recorded benchmark output.
func TestRatios(t *testing.T) {
	for _, tool := range []string{"sh", "awk"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	out, err := exec.Command("sh", "ratios.sh", filepath.Join("testdata", "bench-sample.txt")).CombinedOutput()
	if err != nil {
		t.Fatalf("ratios.sh: %v\n%s", err, out)
	}
	want := []string{
		// median of 9000, 10000, 12000 over 8000
		"sync append, 64 writers       AppendSync/writers=64/anchors=16              10000 PeerPebbleSync/writers=64             8000    1.25  >= 1.00  PASS",
		"1,000 anchors vs 16           AppendSync/writers=64/anchors=1000             7000 AppendSync/writers=64/anchors=16            10000    0.70  >= 0.80  MISS",
		"(1,000 anchors vs Pebble)",
		"batch sync, 1,000 records      AppendBatchSync/size=1000                    200000 PeerPebbleBatchSync/size=1000              250000    0.80  >= 0.80  PASS",
		"no-sync append, 1 writer       AppendNoSync/writers=1                        50000 PeerPebbleNoSync/writers=1                 100000    0.50  >= 0.60  MISS",
		"get, 1M keys                   Get                                          300000 PeerPebbleGet                              500000    0.60  >= 0.50  PASS",
		// 10000 over 10200
		"admission overhead AppendSync/writers=64/anchors=16 10000 AppendSyncNoAdmission/writers=64/anchors=16 10200 0.98 >= 0.95 PASS",
		"verify, 1 thread Verify/threads=1 300000 PeerHashOnly/threads=1 1000000 0.30 >= 0.70 MISS",
		"verify, 2 threads vs 1 Verify/threads=2 540000 Verify/threads=1 300000 1.80 >= 1.60 PASS",
		"merge vs sort-merge Merge 300000 PeerSortMerge 150000 2.00 >= 1.00 PASS",
		"snapshot vs zstd alone SnapshotCreate/durable 500000 PeerZstdOnly 1000000 0.50 >= 0.60 MISS",
		"rebuild: snapshot vs replay RebuildIndex/from-snapshot 600000 RebuildIndex/full 150000 4.00 >= 5.00 MISS",
		"(the same, 100,000 keys) RebuildIndex/keys=100000/from-snapshot 900000 RebuildIndex/keys=100000/full 150000 6.00 - info",
		"targets: 6 PASS, 5 MISS, 0 without data",
	}
	for _, w := range want {
		if !strings.Contains(squeeze(string(out)), strings.Join(strings.Fields(w), " ")) {
			t.Errorf("ratios.sh output lacks %q:\n%s", w, out)
		}
	}
}

// squeeze collapses runs of spaces, so the test does not pin column widths.
func squeeze(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		b.WriteString(strings.Join(strings.Fields(line), " "))
		b.WriteByte('\n')
	}
	return b.String()
}
