# Idemgate. `make run` starts the gateway on the embedded store in front of
# the example CRM; `make test` runs vet and the whole test suite.
GO      ?= go
TAGS    := nobadger,nomysql,nopgx
BIN     := bin/idemgate

.PHONY: all build run demo mcp-demo drill test vet lint clean soak bench bench-micro

all: build

build:
	$(GO) build -tags $(TAGS) -o $(BIN) ./cmd/idemgate
	$(GO) build -o bin/crm ./examples/crm
	$(GO) build -o bin/demo ./examples/demo

# The gateway (Caddyfile.example, embedded store) on :8080 in front of the
# example CRM on 127.0.0.1:9001. Ctrl-C stops both. It refuses to start
# when a port it needs is taken: Caddy listens with SO_REUSEPORT, so a
# second gateway would bind too and split the traffic with the first.
# The operator console (127.0.0.1:8443/ops/) gets a password made for the
# run, printed with its user name. The example CRM keeps its deals in
# memory, so the gateway's store is new on every run too (a temporary
# directory, printed at start and removed when the run ends): the
# README's walkthrough answers as written every time.
run: build
	@bin/demo -check-ports :8080,127.0.0.1:9001,localhost:2019,127.0.0.1:8443 -who 'make run'
	@store=$$(mktemp -d "$${TMPDIR:-/tmp}/idemgate-run-XXXXXX") || exit 1; \
	trap 'rm -rf "$$store"' EXIT INT TERM; \
	echo "store: embedded, new for this run, in $$store (removed when the run ends)"; \
	pw=$$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n'); \
	IDEMGATE_CONSOLE_HASH=$$($(BIN) hash-password --plaintext "$$pw") || exit 1; \
	export IDEMGATE_CONSOLE_HASH; \
	echo "operator console: http://127.0.0.1:8443/ops/ (user operator, password $$pw)"; \
	bin/crm -listen 127.0.0.1:9001 & crm=$$!; \
	trap 'kill $$crm 2>/dev/null; rm -rf "$$store"' EXIT INT TERM; \
	IDEMGATE_STORE_DIR=$$store CRM_URL=http://127.0.0.1:9001 $(BIN) run --config Caddyfile.example --adapter caddyfile

# One webhook delivered three times (two racing): one deal is created.
# Through the `make run` gateway when it is running, else through a
# gateway and a CRM of its own on free ports.
demo: build
	@bin/demo

# An agent's MCP tool call that times out, and its retries on new
# sessions, through a gateway in front of an MCP server made with the
# official Go SDK (examples/mcp): one deal. Both on free loopback ports.
mcp-demo: build
	@$(GO) run ./examples/mcp

# `idemgate drill` (docs/drill.md) against the example CRM, started on a
# free loopback port: examples/drill/drill.yaml's nine scenarios through
# a gateway and a fault proxy of the drill's own. Prints the report;
# bin/drill-report.html and .json keep it. About 15 seconds.
drill: build
	@dir=$$(mktemp -d); trap 'kill $$crm 2>/dev/null; rm -rf $$dir' EXIT INT TERM; \
	bin/crm -listen 127.0.0.1:0 2>$$dir/crm.log & crm=$$!; \
	for i in $$(seq 50); do \
		url=$$(sed -n 's|.*listening on \(http://[0-9.:]*\).*|\1|p' $$dir/crm.log); \
		[ -n "$$url" ] && break; sleep 0.1; \
	done; \
	[ -n "$$url" ] || { echo "make drill: the example CRM did not start:"; cat $$dir/crm.log; exit 2; }; \
	CRM_URL=$$url $(BIN) drill -yes -json bin/drill-report.json -html bin/drill-report.html examples/drill/drill.yaml

vet:
	$(GO) vet ./...

lint: vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

test: build vet
	IDEMGATE_BIN=$(CURDIR)/$(BIN) $(GO) test -race -count=1 -timeout 12m ./...

# Mixed traffic with random upstream faults and Redis restarts through two
# gateways on a real redis-server, then the invariant check (e2e/soak_test.go):
# `make soak`, `make soak DURATION=10s`. IDEMGATE_SOAK_SEED=n repeats a run's
# faults. Every wait in the test is bounded by DURATION or a short timeout,
# so go test's 10m limit is lifted for long soaks.
DURATION ?= 60s
soak: build
	IDEMGATE_BIN=$(CURDIR)/$(BIN) IDEMGATE_REQUIRE_REDIS=1 IDEMGATE_SOAK_DURATION=$(DURATION) \
		$(GO) test -count=1 -v -timeout 0 -run '^TestSoak$$' ./e2e

# The load benchmark (bench/main.go): plain Caddy reverse_proxy against the
# gateway's execute, replay, conflict and passthrough paths on Redis and
# on the embedded store, then the same with the gateway pinned to one CPU
# and everything else on the other; one binary, interleaved rounds, wrk as
# the load generator when installed. Prints the table and the ratios and
# writes bench/results.md. About 3-4 minutes; every phase is bounded in
# time. `make bench BENCHFLAGS="-rounds 9 -profile bench/tmp"` for more
# rounds or CPU profiles of the gateway; docs/performance.md explains it.
BENCHFLAGS ?=
bench: build
	$(GO) run ./bench -gateway $(BIN) -out bench/results.md $(BENCHFLAGS)

# Micro-benchmarks with allocations: keying, the store, the handler with an
# in-memory upstream (embedded store and redis-server).
bench-micro:
	$(GO) test -run '^$$' -bench . -benchmem ./keying ./store/redis ./store/embedded ./caddymodule

clean:
	rm -rf bin
