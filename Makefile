# tilectl: build, test and demo. `make help` lists the targets.
# Tests and the demo need PostgreSQL; scripts/pg.sh finds one or starts a
# throwaway cluster, which is stopped and deleted afterwards, even on failure.

SHELL   := /usr/bin/env bash
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
BENCH_OUT ?= bench.out
PKGS    ?= ./...

# with_pg runs its argument with TILECTL_TEST_DATABASE_URL set, and stops a
# throwaway cluster when done, whatever the exit status.
define with_pg
	set -euo pipefail; pgenv=$$(scripts/pg.sh); eval "$$pgenv"; \
	trap 'if [ -z "$$TILECTL_PG_THROWAWAY" ]; then scripts/pg.sh drop-templates "$$TILECTL_TEST_DATABASE_URL"; fi; scripts/pg.sh stop "$$TILECTL_PG_THROWAWAY"' EXIT; \
	$(1)
endef

.PHONY: all help build man package dist test lint demo bench fuzz-short chaos stress clean

all: build

help:
	@echo "make build       bin/tilectl (and bin/tileprovider)"
	@echo "make test        gofmt check, go vet, go test -race against PostgreSQL"
	@echo "make man         man pages for every command in man/ (MANDIR=)"
	@echo "make dist        dist/tilectl_<version>_<arch>.deb: binary, man pages, completions, systemd units, example config (also make package)"
	@echo "make demo        migrate, import testdata/tiles as flight demo-1, show status"
	@echo "make bench       every benchmark, then the table of performance targets"
	@echo "make lint        gofmt -l, go vet, go mod tidy -diff, no conflict markers"
	@echo "make fuzz-short  a short run of every fuzz target"
	@echo "make stress      the mass give-up tests at full size (150,000 and 40,000 give-ups)"
	@echo "make chaos       seeded soak: faults, SIGKILLs, DB breaks and restarts, provider crashes (SEED= ROUNDS= TILES= FAULT_RATE=; DOC=docs/chaos.md records the run)"

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/tilectl ./cmd/tilectl
	@if [ -d cmd/tileprovider ]; then \
		echo "$(GO) build -o bin/tileprovider ./cmd/tileprovider"; \
		$(GO) build -ldflags '$(LDFLAGS)' -o bin/tileprovider ./cmd/tileprovider; \
	fi

# A man page per command, from the command tree itself (cmd/mangen, cobra's
# doc generator). The pages carry the date of the last commit, so the same
# commit gives the same pages.
MANDIR ?= man
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)
man:
	rm -rf $(MANDIR)
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./cmd/mangen -version $(VERSION) $(MANDIR)

# The .deb (scripts/package.sh, built with nfpm from tools/go.mod):
# /usr/bin/tilectl, the man pages, bash, zsh and fish completions, the
# systemd service and timer of packaging/systemd and the example
# /etc/tilectl/config.yaml. make dist is the same.
package:
	@VERSION=$(VERSION) COMMIT=$(COMMIT) GO=$(GO) scripts/package.sh
dist: package

lint:
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then \
		echo "gofmt: these files need formatting (gofmt -w):"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) mod tidy -diff
	cd tools && $(GO) mod tidy -diff
	@scripts/conflict-markers.sh

# The unit, integration, short chaos and security tests, then every fuzz
# target briefly (FUZZTIME each: an execution count, see scripts/fuzz.sh).
test: lint
	@scripts/test-packages.sh
	@$(call with_pg,$(GO) test -race -count=1 -timeout 20m $(PKGS))
	@FUZZTIME=$${FUZZTIME:-20000x} scripts/fuzz.sh

demo: build
	@scripts/demo.sh

# Every Go benchmark (raw output in $(BENCH_OUT), comparable with benchstat),
# then the table of the issues' performance targets, written with the
# command and the machine to docs/performance.md (commit it with the code
# it measured); rows also go to bench.json. BENCHTIME=3s for steadier numbers.
BENCHTIME ?= 1s
bench: build
	@$(call with_pg,$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count=1 -timeout 40m $(PKGS) | tee $(BENCH_OUT); \
		echo; $(GO) run ./cmd/benchreport -json bench.json -page docs/performance.md \
		-command 'make bench BENCHTIME=$(BENCHTIME) PKGS=$(PKGS)' < $(BENCH_OUT))

# Every fuzz target for FUZZTIME (make test runs 20000 executions each).
fuzz-short:
	@FUZZTIME=$${FUZZTIME:-300000x} scripts/fuzz.sh

# The seeded chaos soak (docs/chaos.md): injected faults, SIGKILLs of
# tilectl, broken database connections, database restarts and provider
# crashes, invariants checked after each round. It starts its own throwaway
# PostgreSQL cluster (so it can restart it). A two-round version runs in
# make test (internal/chaos).
SEED ?=
ROUNDS ?= 10
TILES ?= 60
FAULT_RATE ?= 0.3
DOC ?=
chaos:
	@SEED=$(SEED) ROUNDS=$(ROUNDS) TILES=$(TILES) FAULT_RATE=$(FAULT_RATE) DOC=$(DOC) $(GO) run ./cmd/tilechaos

# The mass give-up tests at full size (make test runs them at a tenth):
# 150,000 give-ups into the default ring, 40,000 into a 256 KiB one.
stress:
	@$(call with_pg,TILECTL_MASS_FULL=1 $(GO) test -count=1 -timeout 30m -run 'TestAMassGiveUp|TestNoGiveUpCommitsAfter' -v ./retrydecorator/)

clean:
	rm -rf bin man dist demo-run $(BENCH_OUT) bench.json
