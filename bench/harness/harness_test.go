package harness

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2"
)

// TestRunSmall runs every workload on the main module's systems at a tiny
// size, two rounds, and checks the report holds together: counts, ordered
// percentiles, skips where a system lacks the capability, a configuration
// stated by every system, paired ratios, and files that parse.
func TestRunSmall(t *testing.T) {
	defer func(c int64) { fileChunk = c }(fileChunk)
	fileChunk = 1 << 20
	cfg := Config{Writers: 4, ValueSize: 100, Count: 200, BatchSize: 50, ReadPasses: 3, VerifyThreads: 2,
		ProofOps: 5, Rounds: 2, Dir: t.TempDir()}
	rs, err := Run(context.Background(), cfg, MainOpeners(), Workloads, nil)
	if err != nil {
		t.Fatal(err)
	}
	// What each system runs; every other workload is skipped (once: a
	// skipped system is not opened again in later rounds).
	runs := map[string][]string{
		"anchordb":       Workloads,
		"pebble":         {"sync-append", "batch-sync", "nosync-append", "get", "get-flushed", "history", "space"},
		"pebble-default": {"sync-append", "batch-sync", "nosync-append", "get", "get-flushed", "history", "space"},
		"file+fdatasync": {"sync-append", "batch-sync", "nosync-append", "proof"},
		"floor":          {"merge", "verify", "snapshot"},
	}
	want := 0
	for _, ws := range runs {
		want += len(ws)*cfg.Rounds + len(Workloads) - len(ws)
	}
	if len(rs) != want {
		t.Fatalf("%d results, want %d", len(rs), want)
	}
	for _, r := range rs {
		want, ok := runs[r.System]
		if !ok {
			t.Fatalf("unexpected system %q", r.System)
		}
		if (r.Skipped == "") != slices.Contains(want, r.Workload) {
			t.Fatalf("%s on %s: skipped %q, want it run: %v", r.Workload, r.System, r.Skipped, slices.Contains(want, r.Workload))
		}
		if r.Skipped != "" {
			continue
		}
		if r.Config == "" || r.Round < 1 || r.Round > cfg.Rounds {
			t.Fatalf("%s on %s: no configuration stated, or round %d", r.Workload, r.System, r.Round)
		}
		records := cfg.Count
		switch r.Workload {
		case "get", "get-flushed", "history":
			records *= cfg.ReadPasses // each pass reads every key (history: every version)
		case "proof":
			records = cfg.ProofOps
		}
		if r.Records != records || r.RecordsSec <= 0 || r.Seconds <= 0 {
			t.Fatalf("%s on %s: %+v", r.Workload, r.System, r)
		}
		if !(r.P50us <= r.P99us && r.P99us <= r.P999us) || r.P999us <= 0 {
			t.Fatalf("%s on %s: percentiles out of order: %+v", r.Workload, r.System, r)
		}
		if r.System == "floor" { // in memory: no disk figure
			r.DiskBytes = 1
		}
		if r.DiskBytes <= 0 || r.PeakHeapMB <= 0 {
			t.Fatalf("%s on %s: no disk or heap figure: %+v", r.Workload, r.System, r)
		}
		if r.Workload == "space" && (r.SettledBytes <= 0 || r.CompactedBytes <= 0 || r.CompactedFileBytes <= 0 || r.LogicalBytes != int64(cfg.Count*116)) {
			t.Fatalf("space on %s: %+v", r.System, r)
		}
	}
	for _, s := range Summarize(rs) {
		if s.Rounds == 0 {
			continue
		}
		if s.Rounds != cfg.Rounds {
			t.Fatalf("%s on %s: %d rounds summarized", s.Workload, s.System, s.Rounds)
		}
		paired := s.System != "anchordb" && slices.Contains(runs["anchordb"], s.Workload)
		if paired != (s.Ratio > 0) || s.RatioMin > s.Ratio || s.Ratio > s.RatioMax {
			t.Fatalf("%s on %s: ratio %v [%v–%v]", s.Workload, s.System, s.Ratio, s.RatioMin, s.RatioMax)
		}
	}
	out := filepath.Join(t.TempDir(), "out")
	if err := WriteAll(out, cfg, rs); err != nil {
		t.Fatal(err)
	}
	for _, w := range Workloads {
		f, err := os.Open(filepath.Join(out, w+".svg"))
		if err != nil {
			t.Fatal(err)
		}
		dec := xml.NewDecoder(f)
		rects, texts := 0, 0
		for {
			tok, err := dec.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s.svg is not XML: %v", w, err)
			}
			if se, ok := tok.(xml.StartElement); ok {
				switch se.Name.Local {
				case "rect":
					rects++
				case "text":
					texts++
				}
			}
		}
		f.Close()
		if rects < 2 || texts < 4 {
			t.Fatalf("%s.svg has %d bars and %d labels", w, rects, texts)
		}
	}
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Header  Header
		Results []Result
	}
	if err := json.Unmarshal(b, &back); err != nil || len(back.Results) != len(rs) || back.Header.Machine == "" {
		t.Fatalf("results.json: %v (%d results, machine %q)", err, len(back.Results), back.Header.Machine)
	}
	txt, err := os.ReadFile(filepath.Join(out, "results.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(txt), "machine: ") {
		t.Fatalf("results.txt does not start with the machine line:\n%s", txt)
	}
	for _, o := range MainOpeners() {
		if !strings.Contains(string(txt), o.Name) {
			t.Fatalf("table lacks %s:\n%s", o.Name, txt)
		}
	}
}

// TestSummarizePairsRounds: the ratio is the median of the per-round
// ratios, each round's anchordb run against the same round's peer run —
// not the ratio of the medians — and the spread is theirs.
func TestSummarizePairsRounds(t *testing.T) {
	var rs []Result
	add := func(sys string, round int, rate float64) {
		rs = append(rs, Result{Workload: "sync-append", System: sys, Round: round, Records: 10, RecordsSec: rate})
	}
	// anchordb 100, 50, 200, 90, 110; the peer 80, 100, 100, 100, 100:
	// per-round ratios 1.25, 0.5, 2, 0.9, 1.1 → median 1.1 [0.5–2]; the
	// medians' ratio would be 100/100 = 1.
	for i, p := range [][2]float64{{100, 80}, {50, 100}, {200, 100}, {90, 100}, {110, 100}} {
		add("anchordb", i+1, p[0])
		add("peer", i+1, p[1])
	}
	add("lone", 1, 10) // no round shared with a missing anchordb run: unpaired
	rs[len(rs)-1].Workload = "get"
	sums := Summarize(rs)
	if len(sums) != 3 {
		t.Fatalf("%d summaries", len(sums))
	}
	a, p, l := sums[0], sums[1], sums[2]
	if a.System != "anchordb" || a.RecordsSec != 100 || a.RecordsSecMin != 50 || a.RecordsSecMax != 200 || a.Ratio != 0 {
		t.Fatalf("anchordb: %+v", a)
	}
	if p.RecordsSec != 100 || math.Abs(p.Ratio-1.1) > 1e-9 || p.RatioMin != 0.5 || p.RatioMax != 2 || p.Rounds != 5 {
		t.Fatalf("peer: %+v", p)
	}
	if l.Ratio != 0 || l.Rounds != 1 {
		t.Fatalf("unpaired: %+v", l)
	}
	// Proof compares p99 latencies (the peer's over anchordb's), space the
	// bytes (anchordb's over the peer's).
	pr := []Result{
		{Workload: "proof", System: "anchordb", Round: 1, P99us: 2000},
		{Workload: "proof", System: "tessera-posix", Round: 1, P99us: 100000},
		{Workload: "space", System: "anchordb", Round: 1, SettledBytes: 300, CompactedBytes: 200, CompactedFileBytes: 150},
		{Workload: "space", System: "pebble", Round: 1, SettledBytes: 150, CompactedBytes: 100, CompactedFileBytes: 300},
	}
	s := Summarize(pr)
	if s[1].Ratio != 50 || s[3].Ratio != 2 || s[3].Ratio2 != 2 || s[3].Ratio3 != 0.5 {
		t.Fatalf("proof/space ratios: %+v / %+v", s[1], s[3])
	}
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1}, 2}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(c.xs); got != c.want {
			t.Fatalf("Median(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}

// TestMachineLine: the machine line names what this machine is, read from
// the running system.
func TestMachineLine(t *testing.T) {
	m := Machine(t.TempDir())
	for _, want := range []string{fmt.Sprintf("%d CPUs", runtime.NumCPU()), runtime.Version()} {
		if !strings.Contains(m, want) {
			t.Fatalf("machine line %q lacks %q", m, want)
		}
	}
	if runtime.GOOS == "linux" {
		for _, want := range []string{"RAM", "Linux ", " on "} {
			if !strings.Contains(m, want) {
				t.Fatalf("machine line %q lacks %q", m, want)
			}
		}
	}
}

// TestIndexPebbleOptionsMatchEngine: the Pebble peer's options are the
// index's, as the engine builds them (read through Options.PebbleOptions),
// so the peer cannot drift from the index it stands for.
func TestIndexPebbleOptionsMatchEngine(t *testing.T) {
	var got *pebble.Options
	db, err := engine.Open(t.TempDir(), engine.Options{PebbleOptions: func(o *pebble.Options) { got = o.Clone() }})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if got == nil {
		t.Fatal("the engine did not show its index options")
	}
	want := IndexPebbleOptions()
	want.EnsureDefaults()
	cache := got.CacheSize
	if got.Cache != nil {
		cache = got.Cache.MaxSize()
	}
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"cache", cache, want.CacheSize},
		{"memtable", got.MemTableSize, want.MemTableSize},
		{"memtable stop", got.MemTableStopWritesThreshold, want.MemTableStopWritesThreshold},
		{"L0 compaction", got.L0CompactionThreshold, want.L0CompactionThreshold},
		{"L0 stop", got.L0StopWritesThreshold, want.L0StopWritesThreshold},
		{"format", got.FormatMajorVersion, want.FormatMajorVersion},
		{"levels", levels(got), levels(want)},
		{"max concurrent compactions", maxConc(got), maxConc(want)},
	} {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s: the index has %v, the peer %v", c.what, c.got, c.want)
		}
	}
	if want.DisableWAL {
		t.Error("the peer must keep its WAL: it is its durability")
	}
}

// levels describes the per-level options that shape the tables.
func levels(o *pebble.Options) string {
	var b strings.Builder
	for _, l := range o.Levels {
		comp := "default"
		if l.Compression != nil {
			comp = l.Compression().Name
		}
		fmt.Fprintf(&b, "[%d %d %d %s %v] ", l.BlockSize, l.BlockRestartInterval, l.IndexBlockSize, comp, l.FilterPolicy != nil)
	}
	return b.String()
}

func maxConc(o *pebble.Options) string {
	if o.CompactionConcurrencyRange == nil {
		return "default"
	}
	lo, hi := o.CompactionConcurrencyRange()
	return fmt.Sprint(lo, hi)
}

func TestRunRefusesBadConfig(t *testing.T) {
	if _, err := Run(context.Background(), Config{}, MainOpeners(), Workloads, nil); err == nil {
		t.Fatal("a zero config ran")
	}
	cfg := Config{Writers: 1, ValueSize: 1, Count: 1, BatchSize: 1, Dir: t.TempDir()}
	if _, err := Run(context.Background(), cfg, MainOpeners(), []string{"nonsense"}, nil); err == nil {
		t.Fatal("an unknown workload ran")
	}
	// A bad name after good ones is refused before any of them runs.
	ran := 0
	rs, err := Run(context.Background(), cfg, MainOpeners(), []string{Workloads[0], "nonsense"}, func(Result) { ran++ })
	if err == nil || ran > 0 || len(rs) > 0 {
		t.Fatalf("err %v after %d runs: want the unknown workload refused before anything runs", err, ran)
	}
}

// TestConfigLimits: a size beyond a limit is refused with INPUT_001 naming
// the limit before anything is allocated or written (a --value-size of
// 99999999999 used to die of "out of memory").
func TestConfigLimits(t *testing.T) {
	ok := Config{Writers: 4, ValueSize: 100, Count: 200, BatchSize: 50, ReadPasses: 3}
	if err := ok.Validate(); err != nil {
		t.Fatalf("a sound config: %v", err)
	}
	for _, c := range []struct {
		name  string
		edit  func(*Config)
		limit string
	}{
		{"value size", func(c *Config) { c.ValueSize = 99999999999 }, "16777216"},
		{"value size zero", func(c *Config) { c.ValueSize = 0 }, "16777216"},
		{"count", func(c *Config) { c.Count = MaxCount + 1 }, "10000000"},
		{"count zero", func(c *Config) { c.Count = 0 }, "10000000"},
		{"writers", func(c *Config) { c.Writers = MaxWriters + 1 }, "4096"},
		{"writers zero", func(c *Config) { c.Writers = 0 }, "4096"},
		{"batch", func(c *Config) { c.BatchSize = MaxBatchSize + 1 }, "100000"},
		{"batch zero", func(c *Config) { c.BatchSize = 0 }, "100000"},
		{"read passes", func(c *Config) { c.ReadPasses = MaxReadPasses + 1 }, "100"},
		{"read passes negative", func(c *Config) { c.ReadPasses = -1 }, "100"},
		{"batch bytes", func(c *Config) { c.ValueSize, c.BatchSize = 16<<20, 1000 }, "268435456"},
		{"total bytes", func(c *Config) { c.ValueSize, c.Count, c.BatchSize = 1<<20, 10000, 10 }, "8589934592"},
		{"reads", func(c *Config) { c.Count, c.ReadPasses = MaxCount, 11 }, "100000000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := ok
			c.edit(&cfg)
			err := cfg.Validate()
			if errs.CodeOf(err) != errs.CodeInvalidInput || !strings.Contains(err.Error(), c.limit) {
				t.Fatalf("got %v, want INPUT_001 naming %s", err, c.limit)
			}
			if _, err := Run(context.Background(), cfg, MainOpeners(), Workloads, nil); errs.CodeOf(err) != errs.CodeInvalidInput {
				t.Fatalf("Run: %v", err)
			}
		})
	}
}

// TestRatioCharts: the Go suite's table, as ratios.sh prints it with
// -tsv, parses into rows and draws one chart per group, every row labelled,
// a row without data marked so.
func TestRatioCharts(t *testing.T) {
	tsv := "#\tmachine: m\n#\tcommit: c\n" +
		"targets\tsync append\tAppendSync\tPeerPebbleSync\trecords/s\t100000\t90000\t1.1\t0.9\t1.3\t5\t1.0\tPASS\n" +
		"targets\trecovery\tRecovery\tRecovery\tlarge-open-ms\t1100\t1000\t1.1\t1\t1.5\t3\t<1.2\tPASS (only 3 samples)\n" +
		"targets\tno-sync\tAppendNoSync\tPeerPebbleNoSync\trecords/s\t500000\t-\t-\t-\t-\t0\t0.6\tno data\n" +
		"load\tget p99\tGetUnderLoad\tPeerPebbleGetUnderLoad\tget-p99-us\t400\t800\t0.5\t0.5\t0.5\t1\t-\tinfo (only 1 samples)\n"
	hdr, rows, err := ParseRatioRows(strings.NewReader(tsv))
	if err != nil {
		t.Fatal(err)
	}
	if len(hdr) != 2 || hdr[0] != "machine: m" || len(rows) != 4 {
		t.Fatalf("header %q, %d rows", hdr, len(rows))
	}
	if r := rows[1]; r.Ratio != 1.1 || r.RatioMin != 1 || r.RatioMax != 1.5 || r.Samples != 3 || r.Target != "<1.2" || r.Unit != "large-open-ms" {
		t.Fatalf("row: %+v", r)
	}
	if r := rows[2]; r.Samples != 0 || r.PeerValue != 0 || r.Result != "no data" {
		t.Fatalf("row without data: %+v", r)
	}
	dir := t.TempDir()
	if err := WriteRatioCharts(dir, hdr, rows); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file  string
		wants []string
	}{
		{"go-targets.svg", []string{"sync append", "recovery", "no-sync", "no data", "target ≤ 1.2", "machine: m"}},
		{"go-load.svg", []string{"get p99", "get-p99-us", "0.50 [0.50–0.50]"}},
	} {
		b, err := os.ReadFile(filepath.Join(dir, c.file))
		if err != nil {
			t.Fatal(err)
		}
		if err := xml.Unmarshal(b, new(struct{})); err != nil {
			t.Fatalf("%s is not XML: %v", c.file, err)
		}
		for _, w := range c.wants {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s lacks %q", c.file, w)
			}
		}
	}
	if _, _, err := ParseRatioRows(strings.NewReader("targets\ttoo\tfew\n")); err == nil {
		t.Fatal("a short row parsed")
	}
}
