package main

import (
	"fmt"
	"strings"

	"github.com/anchordb/anchordb/bench/harness"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/spf13/pflag"
)

var benchCmd = &command{
	name:    "bench",
	summary: "run named workloads against anchordb and its peers in this process: throughput, latency percentiles, disk, heap",
	detail: `Runs each workload against anchordb and its peers in this process, each system in a
fresh directory under --tmp (default: the system's temp directory), with the same keys,
values and durability (acknowledged after fsync):

  sync-append    --writers goroutines, one durable record per call
  batch-sync     durable batches of --batch records
  nosync-append  one writer, records acknowledged once they reached the OS
  get            point reads of every loaded key, in a fixed random order
  get-flushed    the same, after each system flushed its memtables to disk
  history        every version of a key (8 per key), newest first
  merge          every record in the deterministic merged order
  verify         a full verification of every record
  snapshot       a durable snapshot of the state
  proof          time to proof: append a record, sign a checkpoint, prove it
  space          bytes on disk per record once loaded and settled

Systems: anchordb; Pebble (Set with pebble.Sync; versions as key suffixes) with the
options anchordb's index runs with, and again as it comes ('pebble-default'); a plain
file with fdatasync (the physical floor of the appends; for proof, one write and
fdatasync) and 'floor', the compute floor of merge, verify and snapshot (the same
records in memory: sort only, BLAKE3 only, zstd only). A system without a workload's capability is listed as skipped. Prints a table
with every system's records/s, p50/p99/p999 latency, bytes on disk and peak heap, and
anchordb's throughput as a ratio to each peer; --out DIR also writes results.json,
results.txt and one SVG chart per workload. Needs no database (--dir is ignored).

Limits (beyond them the run is refused up front, INPUT_001, exit 2): --value-size
1..16777216 (the engine's value limit), --count 1..10000000, --writers 1..4096, --batch
1..100000, --read-passes 0..100; one batch (--batch × (--value-size + 144)) at most 256 MiB,
the engine's limit of one append; --count × --value-size at most 8 GiB; --count ×
--read-passes at most 100000000 reads.

The peers that would add to anchordb's dependencies — Badger, immudb, Tessera — are
in the nested module bench/peers: 'cd bench/peers && go run ./cmd/peerbench' takes the
same flags and runs every system (make bench does).`,
	minArgs: 0, maxArgs: 0,
	setup: func(fs *pflag.FlagSet) runFunc {
		cfg := harness.Config{}
		var workloads, out, systems string
		fs.IntVar(&cfg.Writers, "writers", 64, "concurrent writers of sync-append")
		fs.IntVar(&cfg.ValueSize, "value-size", 100, "value bytes")
		fs.IntVar(&cfg.Count, "count", 20000, "records per workload and system")
		fs.IntVar(&cfg.BatchSize, "batch", 1000, "records per batch (batch-sync, and loading for the read workloads)")
		fs.IntVar(&cfg.ReadPasses, "read-passes", 5, "passes over every key of get and history")
		fs.StringVar(&cfg.Dir, "tmp", "", "parent directory of the systems' directories")
		fs.StringVar(&workloads, "workload", strings.Join(harness.Workloads, ","), "comma-separated workloads")
		fs.StringVar(&systems, "systems", "anchordb,pebble,file+fdatasync,floor", "comma-separated systems")
		fs.StringVar(&out, "out", "", "write results.json, results.txt and SVG charts here")
		return func(e *env, _ []string) error {
			openers, err := pickSystems(harness.MainOpeners(), systems)
			if err != nil {
				return err
			}
			rs, err := harness.Run(e.ctx, cfg, openers, strings.Split(workloads, ","), e.print.BenchResult)
			if err != nil {
				if errs.CodeOf(err) != "" { // e.g. a size over a limit: INPUT_001 naming it
					return err
				}
				return errs.Wrap(errs.CodeInvalidInput, err, "bench")
			}
			if out != "" {
				if err := harness.WriteAll(out, cfg, rs); err != nil {
					return errs.Wrap(errs.CodeWriteFailed, err, "write results to %s", out)
				}
			}
			e.print.Bench(cfg, rs)
			return nil
		}
	},
}

// pickSystems returns the openers named in the comma-separated list.
func pickSystems(all []harness.Opener, list string) ([]harness.Opener, error) {
	var out []harness.Opener
	for _, name := range strings.Split(list, ",") {
		found := false
		for _, o := range all {
			if o.Name == strings.TrimSpace(name) {
				out, found = append(out, o), true
			}
		}
		if !found {
			return nil, errs.New(errs.CodeInvalidInput, "unknown system %q", name)
		}
	}
	return out, nil
}

// benchPrinter prints the harness's results: each as it comes (progress,
// on stderr) and the table of them all. It is part of printer; its
// methods are here, beside the only code of the command that knows the
// harness.
type benchPrinter interface {
	BenchResult(r harness.Result)
	Bench(cfg harness.Config, rs []harness.Result)
}

// BenchResult says on stderr how a workload ran on a system, unless quiet.
func (p *textPrinter) BenchResult(r harness.Result) {
	switch {
	case p.quiet:
	case r.Skipped != "":
		fmt.Fprintf(p.stderr, "  %s on %s: skipped (%s)\n", r.Workload, r.System, r.Skipped)
	default:
		fmt.Fprintf(p.stderr, "  %s on %s: %.0f records/s\n", r.Workload, r.System, r.RecordsSec)
	}
}

func (p *textPrinter) Bench(_ harness.Config, rs []harness.Result) {
	var b strings.Builder
	harness.Table(&b, rs)
	for _, line := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		p.out.linef("%s", line)
	}
}

// BenchResult prints nothing: the results come together at the end.
func (p *jsonPrinter) BenchResult(harness.Result) {}

func (p *jsonPrinter) Bench(cfg harness.Config, rs []harness.Result) {
	p.out.json(map[string]any{"config": cfg, "results": rs})
}
