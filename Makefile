# anchordb — see README.md.
GO      ?= go
PKGS    := ./...
FUZZTIME ?= 30s

.PHONY: all build demo test test-plain test-race conformance bench bench-long fuzz fuzz-ci lint clean

all: build

build:
	$(GO) build -o bin/anchordb ./cmd/anchordb

## demo: the main job — a fresh database, concurrent writers, verification, a report.
demo: build
	./bin/anchordb demo

## test: everything CI runs. Keep under 10 minutes on 2 cores.
## The plain pass, the race pass and the CLI conformance run side by side:
## each alone leaves a core idle for much of its run (one test at a time,
## fsync waits), and run one after the other they took 9-11 minutes.
## --output-sync keeps each one's output together.
test: lint
	$(MAKE) -j2 --output-sync=target test-plain test-race conformance

## test-plain: every package, every test, no race detector.
test-plain:
	$(GO) test -count=1 -timeout 30m $(PKGS)

## test-race: the concurrent packages under the race detector, with the
## exhaustive tests stepping over points the plain pass visits (-short).
test-race:
	$(GO) test -count=1 -race -short -timeout 30m ./engine/... ./segment/ ./internal/journal/ ./outbox/

conformance: build
	@command -v jq >/dev/null || { echo "conformance needs jq"; exit 1; }
	bash ./scripts/conformance.sh

## bench: the Go suite as paired, alternated samples (bench/ratios.sh:
## BENCHPAIRS samples; in each, every benchmark of a pair runs once, in a
## process of its own, engine and peer alternating, the same records on
## both sides, each to rest), then the harness against every real peer
## (BENCHROUNDS rounds, the systems alternating in each; BENCHCOUNT records
## a workload), then the space workload at BENCHSPACECOUNT records. Writes
## bench/results/: go-bench.txt (the raw samples), go-ratios.txt (the
## table), go-*.svg, and the harness's results.* and charts (space/ for
## the space run). docs/PERFORMANCE.md says what each measures. About an
## hour on a quiet 2-vCPU machine. BENCHSMALL=1 shrinks every fixture
## and count for a smoke run of the whole pipeline (make bench BENCHSMALL=1
## BENCHPAIRS=2 BENCHROUNDS=2: a few minutes; its numbers measure nothing).
## The exit status is non-zero if a benchmark process failed.
BENCHCOUNT ?= 100000
BENCHPAIRS ?= 5
BENCHROUNDS ?= 5
BENCHSPACECOUNT ?= 1000000
BENCHSMALL ?=
BENCHCOMMIT = $(shell git rev-parse --short HEAD 2>/dev/null)$(shell git diff --quiet HEAD -- 2>/dev/null || echo ' (with uncommitted changes)')
BENCHHARNESS = --rounds $(BENCHROUNDS) $(if $(BENCHSMALL),--count 2000 --proof-ops 20,--count $(BENCHCOUNT))
BENCHSPACE = --rounds $(BENCHROUNDS) --count $(if $(BENCHSMALL),20000,$(BENCHSPACECOUNT))
bench:
	@mkdir -p bench/results/space
	GO=$(GO) sh bench/ratios.sh run -pairs $(BENCHPAIRS) $(if $(BENCHSMALL),-small) \
		bench/results/go-bench.txt > bench/results/go-ratios.txt; st=$$?; cat bench/results/go-ratios.txt; exit $$st
	cd bench/peers && $(GO) run ./cmd/peerbench $(BENCHHARNESS) --commit "$(BENCHCOMMIT)" \
		--workload sync-append,batch-sync,nosync-append,get,get-flushed,history,merge,verify,snapshot,proof \
		--out ../results > ../results/peers-table.txt; st=$$?; cat ../results/peers-table.txt; exit $$st
	cd bench/peers && $(GO) run ./cmd/peerbench $(BENCHSPACE) --commit "$(BENCHCOMMIT)" --workload space \
		--out ../results/space > ../results/space/peers-table.txt; st=$$?; cat ../results/space/peers-table.txt; exit $$st

## bench-long: the long runs — the headline durable appends (64 writers, and
## batches of 1,000) at 10M records a side, each side's clock stopping only
## once its compaction debt is worked off — as BENCHPAIRS alternated
## samples: bench/results/long/. About 45 minutes on a quiet 2-vCPU machine
## (BENCHSMALL=1: 100,000 records a side).
bench-long:
	@mkdir -p bench/results/long
	GO=$(GO) sh bench/ratios.sh run -long -pairs $(BENCHPAIRS) $(if $(BENCHSMALL),-small) \
		bench/results/long/go-bench-long.txt > bench/results/long/go-ratios-long.txt; st=$$?; cat bench/results/long/go-ratios-long.txt; exit $$st

## Packages with Fuzz targets: fuzz/ holds those that reach exported API;
## a target that needs a package's unexported codecs lives in that package
## (FUZZING.md says which).
FUZZPKGS := ./fuzz/ ./snapshot/ ./engine/internal/schema/

## fuzz: run every fuzz target for FUZZTIME each (make fuzz FUZZTIME=10m).
## fuzz/run.sh reruns a target that hit Go 1.26's -fuzztime deadline race
## once, for as many inputs as it reached (a count has no deadline to race).
## FUZZMINIMIZETIME, if set, bounds the minimizing of each new input.
fuzz:
	GO=$(GO) FUZZMINIMIZETIME=$(FUZZMINIMIZETIME) sh fuzz/run.sh $(FUZZTIME) $(FUZZPKGS)

## fuzz-ci: every fuzz target for 10 s (CI runs it after make test). With a
## fresh fuzz cache, Go's default 60 s minimizing of each new input took most
## of the 10 s, and the deadline race bites during it: 1 s.
fuzz-ci:
	$(MAKE) fuzz FUZZTIME=10s FUZZMINIMIZETIME=1s

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

clean:
	rm -rf bin
