# anchordb — see README.md.
GO      ?= go
PKGS    := ./...
FUZZTIME ?= 30s

.PHONY: all build demo test test-plain test-race conformance bench fuzz fuzz-ci lint clean

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
	$(GO) test -count=1 -race -short -timeout 30m ./engine/ ./segment/ ./internal/journal/ ./outbox/

conformance: build
	@command -v jq >/dev/null || { echo "conformance needs jq"; exit 1; }
	bash ./scripts/conformance.sh

## bench: the Go benchmarks with their in-process peers, then the harness
## against every real peer (bench/peers), writing bench/results/ (see
## docs/PERFORMANCE.md). BENCHCOUNT sets the harness's records per workload:
## at 20,000 a durable-append run lasts a fifth of a second and measures
## mostly start-up (the engine's first memtables, the journal's first
## preallocation), so it is 100,000.
## The Go suite runs BENCHPASSES times over: the disk's fdatasync latency
## drifts by 2x within minutes, and engine and peer run minutes apart in one
## pass, so ratios.sh takes each side's median over passes spread alike.
BENCHCOUNT ?= 100000
BENCHPASSES ?= 3
bench:
	@mkdir -p bench/results
	for i in $$(seq $(BENCHPASSES)); do $(GO) test -run '^$$' -bench . -benchtime 2s -timeout 60m ./bench/ || exit 1; done | tee bench/results/go-bench.txt
	@# tee hides the loop's status: every pass must have ended in "ok".
	@test "$$(grep -c '^ok' bench/results/go-bench.txt)" = "$(BENCHPASSES)" || { echo "make bench: a Go benchmark pass failed" >&2; exit 1; }
	sh bench/ratios.sh bench/results/go-bench.txt | tee bench/results/go-ratios.txt
	cd bench/peers && $(GO) run ./cmd/peerbench --count $(BENCHCOUNT) --out ../results | tee ../results/peers-table.txt

## Packages with Fuzz targets: fuzz/ holds those that reach exported API;
## a target that needs a package's unexported codecs lives in that package
## (FUZZING.md says which).
FUZZPKGS := ./fuzz/ ./cmd/anchordb/ ./snapshot/ ./engine/

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
