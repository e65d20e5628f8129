// Command peerbench runs the benchmark harness against anchordb and every
// peer (Pebble tuned as anchordb's index and as it comes, a plain
// fdatasync'd file, the compute floor, Badger, immudb, Tessera's POSIX log)
// in one process. It takes the flags of `anchordb bench`, and --rounds
// (each workload that many times over, the systems alternating in every
// round), --verify-threads, --proof-ops and --commit (the code measured,
// for the results' header).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/anchordb/anchordb/bench/harness"
	"github.com/anchordb/anchordb/bench/peers"
	"k8s.io/klog/v2"
)

func main() {
	cfg := harness.Config{}
	flag.IntVar(&cfg.Writers, "writers", 64, "concurrent writers of sync-append")
	flag.IntVar(&cfg.ValueSize, "value-size", 100, "value bytes")
	flag.IntVar(&cfg.Count, "count", 20000, "records per workload and system")
	flag.IntVar(&cfg.BatchSize, "batch", 1000, "records per batch (batch-sync, and loading for the read workloads)")
	flag.IntVar(&cfg.ReadPasses, "read-passes", 5, "passes over every key of get and history")
	flag.IntVar(&cfg.VerifyThreads, "verify-threads", 1, "threads of the verify workload, on every system")
	flag.IntVar(&cfg.ProofOps, "proof-ops", harness.DefaultProofOps, "appends the proof workload proves")
	flag.IntVar(&cfg.Rounds, "rounds", 1, "rounds of every workload, the systems alternating in each")
	flag.StringVar(&cfg.Commit, "commit", "", "the code measured (a git commit), for the results' header")
	flag.StringVar(&cfg.Dir, "tmp", "", "parent directory of the systems' directories")
	workloads := flag.String("workload", strings.Join(harness.Workloads, ","), "comma-separated workloads")
	systems := flag.String("systems", "", "comma-separated systems (default: all)")
	out := flag.String("out", "", "write results.json, results.txt and SVG charts here")
	jsonOut := flag.Bool("json", false, "print the results as JSON")
	flag.Parse()
	// Tessera logs through klog; the report is the output.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	openers := peers.Openers()
	if *systems != "" {
		var picked []harness.Opener
		for _, name := range strings.Split(*systems, ",") {
			found := false
			for _, o := range openers {
				if o.Name == name {
					picked, found = append(picked, o), true
				}
			}
			if !found {
				fmt.Fprintf(os.Stderr, "peerbench: unknown system %q\n", name)
				os.Exit(2)
			}
		}
		openers = picked
	}
	hdr := harness.Header{Machine: harness.Machine(cfg.Dir), Commit: cfg.Commit, Started: time.Now()}
	rs, err := harness.Run(ctx, cfg, openers, strings.Split(*workloads, ","), func(r harness.Result) {
		if r.Skipped != "" {
			fmt.Fprintf(os.Stderr, "  %s on %s: skipped (%s)\n", r.Workload, r.System, r.Skipped)
		} else {
			fmt.Fprintf(os.Stderr, "  %s round %d on %s: %.0f records/s, p99 %.0f µs\n", r.Workload, r.Round, r.System, r.RecordsSec, r.P99us)
		}
	})
	hdr.Ended = time.Now()
	if err != nil {
		fmt.Fprintf(os.Stderr, "peerbench: %v\n", err)
		os.Exit(1)
	}
	if *out != "" {
		if err := harness.WriteAllWith(*out, cfg, hdr, rs); err != nil {
			fmt.Fprintf(os.Stderr, "peerbench: %v\n", err)
			os.Exit(1)
		}
	}
	if *jsonOut {
		harness.JSON(os.Stdout, cfg, rs)
		return
	}
	hdr.Lines(os.Stdout)
	fmt.Println()
	harness.TableFor(os.Stdout, cfg, rs)
}
