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
	trap 'scripts/pg.sh stop "$$TILECTL_PG_THROWAWAY"' EXIT; \
	$(1)
endef

.PHONY: all help build test lint demo bench fuzz-short clean

all: build

help:
	@echo "make build       bin/tilectl (and bin/tileprovider)"
	@echo "make test        gofmt check, go vet, go test -race against PostgreSQL"
	@echo "make demo        migrate, import testdata/tiles as flight demo-1, show status"
	@echo "make bench       benchmarks into $(BENCH_OUT)"
	@echo "make lint        gofmt -l and go vet"
	@echo "make fuzz-short  a short run of every fuzz target"

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/tilectl ./cmd/tilectl
	@if [ -d cmd/tileprovider ]; then \
		echo "$(GO) build -o bin/tileprovider ./cmd/tileprovider"; \
		$(GO) build -ldflags '$(LDFLAGS)' -o bin/tileprovider ./cmd/tileprovider; \
	fi

lint:
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then \
		echo "gofmt: these files need formatting (gofmt -w):"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)

test: lint
	@$(call with_pg,$(GO) test -race -count=1 -timeout 15m $(PKGS))

demo: build
	@scripts/demo.sh

bench:
	@$(call with_pg,$(GO) test -run '^$$' -bench . -benchmem -count=1 -timeout 30m $(PKGS) | tee $(BENCH_OUT))

# One line per fuzz target: go test runs one -fuzz target per invocation.
FUZZTIME ?= 15s
fuzz-short:
	$(GO) test -run '^$$' -fuzz '^FuzzLoadYAML$$' -fuzztime $(FUZZTIME) ./config

clean:
	rm -rf bin demo-run $(BENCH_OUT)
