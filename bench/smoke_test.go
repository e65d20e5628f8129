package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anchordb/anchordb/bench/harness"
	"github.com/anchordb/anchordb/engine"
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
		{"SweepSync/value=16384", appendPuts(4, 16, 16<<10, engine.Options{}), 20, 20},
		{"PeerPebbleSync", peerSet(8, 5, ValueSize, tunedPebble, pebble.Sync), 100, 100},
		{"PeerPebbleDefaultSync", peerSet(8, 5, ValueSize, defaultPebble, pebble.Sync), 100, 100},
		{"PeerPebbleBatchSync", peerBatchSync(50, tunedPebble), 3, 150},
		{"PeerPebbleNoSync", peerSet(1, 4, ValueSize, tunedPebble, pebble.NoSync), 100, 100},
		{"PeerPebbleGet", peerGet(getN, true), getN + 10, getN + 10},
		{"SweepPeerPebbleSync/value=1024", peerSet(4, 16, 1<<10, tunedPebble, pebble.Sync), 20, 20},
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

// TestQuiesceMeansAtRest: a write body ends with its database at rest — the
// engine's journal settled and its index flushed, the peer's memtable
// flushed — so the two sides' clocks stop at the same point of the work.
func TestQuiesceMeansAtRest(t *testing.T) {
	ctx := context.Background()
	db := openWatched(t, "", engine.Options{})
	warmAnchors(t, db, AnchorIDs(2))
	settles := db.Metrics().Settles
	flushes, _ := db.watch.Counts()
	if _, err := db.Put(ctx, "anchor-0000", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := db.quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	f2, _ := db.watch.Counts()
	if db.Metrics().Settles <= settles || f2 <= flushes {
		t.Fatalf("engine: settles %d → %d, index flushes %d → %d: not at rest", settles, db.Metrics().Settles, flushes, f2)
	}
	p := openPebble(t, "", tunedPebble)
	warmPebble(t, p, 2)
	pf, _ := p.watch.Counts()
	if err := p.Set([]byte("k"), []byte("v"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := p.quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	if pf2, _ := p.watch.Counts(); pf2 <= pf || p.Metrics().MemTable.Count > 1 {
		t.Fatalf("pebble: flushes %d → %d: not at rest", pf, pf2)
	}
}

// TestGetUnderLoadWorkload runs both sides of the reads-under-load pair on
// a small store: every Get finds its value while the writers run, and the
// percentiles come out ordered.
func TestGetUnderLoadWorkload(t *testing.T) {
	const n = 300
	for name, prepare := range map[string]func(testing.TB, int) store{
		"engine": prepareEngineLoad, "pebble": preparePebbleLoad,
	} {
		t.Run(name, func(t *testing.T) {
			m := map[string]float64{}
			fn := underLoad(t, prepare(t, n), n, func(k string, v float64) { m[k] = v })
			if recs, err := fn(2 * n); err != nil || recs != 2*n {
				t.Fatalf("%d reads: %v", recs, err)
			}
			// The writers all wrote before the reads began (underLoad waits
			// for that); how many more they wrote during a few hundred
			// reads is the run's affair.
			if _, ok := m["writes/s"]; !ok || !(m["get-p50-us"] <= m["get-p99-us"] && m["get-p99-us"] <= m["get-p999-us"]) {
				t.Fatalf("metrics: %v", m)
			}
		})
	}
}

// TestTimeToProofWorkload proves a few appends and probes the disk.
func TestTimeToProofWorkload(t *testing.T) {
	proofs, syncs := timeToProof(t, 3, func() {})
	for i := range proofs {
		if proofs[i] <= 0 || syncs[i] <= 0 {
			t.Fatalf("op %d: proof %v, fdatasync %v", i, proofs[i], syncs[i])
		}
	}
}

// TestRecoveryAfterKill: the recovery benchmark's step on a small base —
// clone, a child that appends a tail and is SIGKILLed, Open — recovers
// every record of the tail and leaves the base unchanged.
func TestRecoveryAfterKill(t *testing.T) {
	base := t.TempDir()
	if err := loadEngine(base, 300, recoveryAnchors); err != nil {
		t.Fatal(err)
	}
	before := treeSizes(t, base)
	for i := 0; i < 2; i++ { // twice: the base must serve again
		var timed int
		d, err := recoverOnce(base, 300, 120, func() { timed++ }, func() { timed++ })
		if err != nil {
			t.Fatal(err)
		}
		if d <= 0 || timed != 2 {
			t.Fatalf("open took %v, timer calls %d", d, timed)
		}
	}
	if after := treeSizes(t, base); !slices.Equal(before, after) {
		t.Fatalf("the base changed:\n%v\n%v", before, after)
	}
}

// treeSizes lists every file under dir with its size and time.
func treeSizes(t *testing.T, dir string) []string {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s %d %s", p, info.Size(), info.ModTime().Format(time.RFC3339Nano)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
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
	// The sweeps' values: the size asked, deterministic, distinct, and
	// not the repetition of a short pattern.
	for _, n := range []int{1 << 10, 16 << 10, 1 << 20} {
		x, y := ValueN(make([]byte, n), 7, n), ValueN(make([]byte, n), 8, n)
		if len(x) != n || string(x) == string(y) || string(x) != string(ValueN(make([]byte, n), 7, n)) {
			t.Fatalf("ValueN(%d) is not a distinct deterministic value", n)
		}
		if strings.Contains(string(x[64:]), string(x[8:64])) {
			t.Fatalf("ValueN(%d) repeats its own bytes", n)
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

// TestRatios checks ratios.sh's arithmetic on a recorded log: ratios are
// taken per sample and their median reported (not the ratio of the
// medians), a sample missing a side is left out, "<" targets check the
// other way, a run missing a side entirely has no data, and runs absent
// from the log print no row.
func TestRatios(t *testing.T) {
	for _, tool := range []string{"sh", "awk"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	out, err := exec.Command("sh", "ratios.sh", "report", filepath.Join("testdata", "ratios-sample.txt")).CombinedOutput()
	if err != nil {
		t.Fatalf("ratios.sh: %v\n%s", err, out)
	}
	want := []string{
		"machine: TestCPU, 2 CPUs",
		"commit: abc1234",
		"date: 2026-01-01 10:00 - 10:30 UTC",
		// per-sample ratios 1.25, 0.5, 2, 0.9, 1.1: median 1.1 (the ratio
		// of the medians, 100000/100000, would be 1.00)
		"sync append, 64 writers x 16 anchors records/s 100000 100000 1.10 [0.50-2.00] 5 >= 1.0 PASS",
		"(the same vs Pebble with its defaults) records/s 100000 50000 2.00 [1.00-4.00] 5 - info",
		"1,000 anchors vs 16 records/s 90000 100000 0.90 [0.75-0.90] 5 >= 0.8 PASS",
		"admission on vs off records/s 100000 100000 1.00 [0.90-1.10] 5 >= 0.95 PASS",
		// the second sample's peer failed: two pairs, 0.8 and 1.2
		"batch sync, 1,000 records records/s 200000 250000 1.00 [0.80-1.20] 2 >= 0.8 PASS (only 2 samples)",
		"no-sync append, 1 writer records/s 500000 - - 0 >= 0.6 no data",
		"get under 64 writers: p50 latency get-p50-us 12.50 10.00 1.25 [1.25-1.25] 1 - info (only 1 samples)",
		// one benchmark, two metrics of the same sample: 1.1, 1.5, 1.0
		"recovery: open after SIGKILL, 10M vs 1M large-open-ms 1100 1000 1.10 [1.00-1.50] 3 <= 1.2 PASS (only 3 samples)",
		"time to proof: p99 vs fdatasync p99 proof-p99-us 2500 500 5.00 [4.50-6.00] 3 <= 4.0 MISS (only 3 samples)",
		"targets: 5 PASS, 1 MISS, 1 without data",
	}
	got := squeeze(string(out))
	for _, w := range want {
		if !strings.Contains(got, strings.Join(strings.Fields(w), " ")) {
			t.Errorf("ratios.sh output lacks %q:\n%s", w, out)
		}
	}
	for _, absent := range []string{"verify", "merge", "steady state"} {
		if strings.Contains(got, absent) {
			t.Errorf("a row for a run the log does not hold: %q\n%s", absent, out)
		}
	}
	// The same table as tab-separated rows, what the charts are drawn from.
	tsv, err := exec.Command("sh", "ratios.sh", "report", "-tsv", filepath.Join("testdata", "ratios-sample.txt")).Output()
	if err != nil {
		t.Fatalf("ratios.sh report -tsv: %v", err)
	}
	hdr, rows, err := harness.ParseRatioRows(strings.NewReader(string(tsv)))
	if err != nil || len(hdr) != 4 {
		t.Fatalf("report -tsv: %d header lines, %v", len(hdr), err)
	}
	found := false
	for _, r := range rows {
		if r.Label == "recovery: open after SIGKILL, 10M vs 1M" {
			found = true
			if r.Ratio != 1.1 || r.RatioMin != 1 || r.RatioMax != 1.5 || r.Samples != 3 || r.Chart != "targets" || r.Target != "<1.2" {
				t.Errorf("recovery row: %+v", r)
			}
		}
	}
	if !found {
		t.Errorf("report -tsv lacks the recovery row:\n%s", tsv)
	}
	pat, err := exec.Command("sh", "ratios.sh", "pattern", "SweepSync/writers=64/value=1024").Output()
	if err != nil || strings.TrimSpace(string(pat)) != "^BenchmarkSweepSync$/^writers=64$/^value=1024$" {
		t.Errorf("pattern: %q, %v", pat, err)
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
