package harness

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
)

// TestRunSmall runs every workload on the main module's systems at a tiny
// size and checks the report holds together: counts, ordered percentiles,
// skips where a system lacks the capability, and files that parse.
func TestRunSmall(t *testing.T) {
	cfg := Config{Writers: 4, ValueSize: 100, Count: 200, BatchSize: 50, ReadPasses: 3, Dir: t.TempDir()}
	rs, err := Run(context.Background(), cfg, MainOpeners(), Workloads, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(Workloads)*len(MainOpeners()) {
		t.Fatalf("%d results, want %d", len(rs), len(Workloads)*len(MainOpeners()))
	}
	// What each system runs; every other workload is skipped.
	runs := map[string][]string{
		"anchordb":       Workloads,
		"pebble":         {"sync-append", "batch-sync", "nosync-append", "get", "history"},
		"file+fdatasync": {"sync-append", "batch-sync", "nosync-append"},
		"floor":          {"merge", "verify", "snapshot"},
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
		records := cfg.Count
		if r.Workload == "get" || r.Workload == "history" {
			records *= cfg.ReadPasses // each pass reads every key (history: every version)
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
		rects := 0
		for {
			tok, err := dec.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s.svg is not XML: %v", w, err)
			}
			if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
				rects++
			}
		}
		f.Close()
		if rects < 2 {
			t.Fatalf("%s.svg has %d bars", w, rects)
		}
	}
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back struct{ Results []Result }
	if err := json.Unmarshal(b, &back); err != nil || len(back.Results) != len(rs) {
		t.Fatalf("results.json: %v (%d results)", err, len(back.Results))
	}
	var tb strings.Builder
	Table(&tb, rs)
	for _, o := range MainOpeners() {
		if !strings.Contains(tb.String(), o.Name) {
			t.Fatalf("table lacks %s:\n%s", o.Name, tb.String())
		}
	}
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
