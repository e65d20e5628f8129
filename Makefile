# anchordb — see README.md.
GO      ?= go
PKGS    := ./...
FUZZTIME ?= 30s

.PHONY: all build demo test test-short race conformance bench fuzz lint clean

all: build

build:
	$(GO) build -o bin/anchordb ./cmd/anchordb

## demo: the main job — a fresh database, concurrent writers, verification, a report.
demo: build
	./bin/anchordb demo

## test: everything CI runs. Keep under 10 minutes on 2 cores.
test: lint
	$(GO) test -count=1 -timeout 15m $(PKGS)
	$(GO) test -count=1 -race -short -timeout 15m ./engine/ ./segment/
	$(MAKE) conformance

conformance: build
	@command -v jq >/dev/null || { echo "conformance needs jq"; exit 1; }
	bash ./scripts/conformance.sh

## bench: Go benchmarks with their peers, in one run (see docs/PERFORMANCE.md).
bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s -timeout 60m ./bench/

## fuzz: run every fuzz target for FUZZTIME each.
fuzz:
	@for t in $$($(GO) test -list '^Fuzz' ./fuzz/ | grep ^Fuzz); do \
		echo "== $$t"; $(GO) test ./fuzz/ -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) || exit 1; \
	done

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

clean:
	rm -rf bin
