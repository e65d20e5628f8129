//go:build unix

package engine

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Memory and descriptors per anchor (docs/PERFORMANCE.md, "Memory and
// descriptors per anchor"):
//
//	go test ./engine -run '^$' -bench AnchorFootprint -benchtime 1x
//
// For 10,000 and 100,000 anchors, a database with one record on each is
// written, then a fresh process (this binary again, so nothing of the
// writing stays in its heap) opens it and reports its resident set (RSS)
// and open descriptors after Open, after a pass that appends one record to
// every anchor (which loads every anchor's state), after a pass of reads
// of every anchor, and after a Close. The per-anchor figure is the growth
// from Open to the end of the appends over the anchors.

const footprintEnv = "ANCHORDB_TEST_FOOTPRINT"

func BenchmarkAnchorFootprint(b *testing.B) {
	if os.Getenv(footprintEnv) != "" {
		b.Skip("the child runs from TestAnchorFootprintChild")
	}
	if _, ok := testutil.OpenFDs(); !ok {
		b.Skip("needs /proc/self")
	}
	for _, anchors := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("anchors=%d", anchors), func(b *testing.B) {
			dir := filepath.Join(memDir(b), "db") // memory is measured, not the disk
			writeFootprintDB(b, dir, anchors)
			for range b.N {
				cmd := exec.Command(os.Args[0], "-test.run=^TestAnchorFootprintChild$", "-test.v")
				cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d", footprintEnv, dir, anchors))
				out, err := cmd.CombinedOutput()
				if err != nil {
					b.Fatalf("child: %v\n%s", err, out)
				}
				vals := map[string]float64{}
				sc := bufio.NewScanner(strings.NewReader(string(out)))
				for sc.Scan() {
					f := strings.Fields(sc.Text())
					if len(f) == 3 && f[0] == "footprint" {
						v, _ := strconv.ParseFloat(f[2], 64)
						vals[f[1]] = v
						b.Logf("%s %s", f[1], f[2])
					}
				}
				b.ReportMetric(vals["rss_open_mib"], "MiB-rss-open")
				b.ReportMetric(vals["rss_appended_mib"], "MiB-rss-appended")
				b.ReportMetric(vals["rss_read_mib"], "MiB-rss-read")
				b.ReportMetric(vals["bytes_per_anchor"], "B-rss/anchor")
				b.ReportMetric(vals["heap_per_anchor"], "B-heap/anchor")
				b.ReportMetric(vals["fds_max"], "fds-max")
			}
		})
	}
}

func writeFootprintDB(b testing.TB, dir string, anchors int) {
	ctx := context.Background()
	db, err := Open(dir, Options{FS: vfs.Default})
	if err != nil {
		b.Fatal(err)
	}
	for start := 0; start < anchors; start += 1000 {
		var es []Entry
		for i := start; i < min(start+1000, anchors); i++ {
			es = append(es, Entry{Anchor: footprintAnchor(i), Type: segment.TypePut, Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("v")})
		}
		if _, err := db.AppendBatch(ctx, es, WithNoSync(true)); err != nil {
			b.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
}

func footprintAnchor(i int) string { return fmt.Sprintf("device-%07d", i) }

// TestAnchorFootprintChild is the measuring child of
// BenchmarkAnchorFootprint; run alone it does nothing.
func TestAnchorFootprintChild(t *testing.T) {
	spec := os.Getenv(footprintEnv)
	if spec == "" {
		t.Skip("the measuring child of BenchmarkAnchorFootprint")
	}
	ctx := context.Background()
	dir, n, _ := strings.Cut(spec, ",")
	anchors, err := strconv.Atoi(n)
	if err != nil {
		t.Fatal(err)
	}
	fdsMax := 0
	report := func(name string, v float64) { fmt.Printf("footprint %s %.1f\n", name, v) }
	settled := func() (rss float64, heap uint64, fds int) {
		runtime.GC()
		debug.FreeOSMemory()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		fds, _ = testutil.OpenFDs()
		fdsMax = max(fdsMax, fds)
		return rssMiB(t), m.HeapAlloc, fds
	}
	rss0, _, fds0 := settled()
	report("rss_start_mib", rss0)
	report("fds_start", float64(fds0))
	db, err := Open(dir, Options{FS: vfs.Default})
	if err != nil {
		t.Fatal(err)
	}
	rssOpen, heapOpen, fdsOpen := settled()
	report("rss_open_mib", rssOpen)
	report("fds_open", float64(fdsOpen))
	for start := 0; start < anchors; start += 1000 {
		var es []Entry
		for i := start; i < min(start+1000, anchors); i++ {
			es = append(es, Entry{Anchor: footprintAnchor(i), Type: segment.TypePut, Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("w")})
		}
		if _, err := db.AppendBatch(ctx, es); err != nil {
			t.Fatal(err)
		}
		if fds, ok := testutil.OpenFDs(); ok {
			fdsMax = max(fdsMax, fds)
		}
	}
	rssApp, heapApp, fdsApp := settled()
	report("rss_appended_mib", rssApp)
	report("fds_appended", float64(fdsApp))
	report("bytes_per_anchor", (rssApp-rssOpen)*(1<<20)/float64(anchors))
	report("heap_per_anchor", float64(int64(heapApp)-int64(heapOpen))/float64(anchors))
	for i := 0; i < anchors; i++ {
		if _, err := db.Record(ctx, footprintAnchor(i), 2); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 0 {
			if fds, ok := testutil.OpenFDs(); ok {
				fdsMax = max(fdsMax, fds)
			}
		}
	}
	rssRead, _, fdsRead := settled()
	report("rss_read_mib", rssRead)
	report("fds_read", float64(fdsRead))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	rssClosed, _, fdsClosed := settled()
	report("rss_closed_mib", rssClosed)
	report("fds_closed", float64(fdsClosed))
	report("fds_max", float64(fdsMax))
	report("file_cache", float64(db.Options().FileCacheSize))
}

// rssMiB is this process's resident set size in MiB (/proc/self/status).
func rssMiB(t *testing.T) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb / 1024
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}
