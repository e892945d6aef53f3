# sandboxd build entry points. Run `make help` for the list of targets.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build
.DELETE_ON_ERROR:

GO         ?= go
GOBIN_DIR  := $(or $(shell $(GO) env GOBIN),$(shell $(GO) env GOPATH)/bin)
export PATH := $(GOBIN_DIR):$(PATH)

IMAGE      ?= sandboxd-sandbox:latest
BASE_IMAGE ?= sandboxd-base:bookworm
IMAGE_DIR  := sandbox-image
BIN        := bin

# Tests find the sandbox image through this.
export SANDBOX_IMAGE := $(IMAGE)

# Protobuf tooling. Plugin versions are pinned (not @latest) because their
# version is written into the generated files, so a new upstream release
# would otherwise make proto-check fail on an unchanged tree. protoc-gen-go
# follows google.golang.org/protobuf in go.mod.
BUF_VERSION                ?= v1.70.0
PROTOC_GEN_GO_VERSION      ?= $(or $(shell $(GO) list -m -f '{{.Version}}' google.golang.org/protobuf 2>/dev/null),v1.36.12)
PROTOC_GEN_GO_GRPC_VERSION ?= v1.6.2
PROTOC_GEN_CONNECT_GO_VERSION ?= $(or $(shell $(GO) list -m -f '{{.Version}}' connectrpc.com/connect 2>/dev/null),v1.21.1)
BUF_DIR    ?= .
PROTO_OUT  ?= proto
# The envd services of the E2B door (orchestrator/door/e2bapi), a buf module of
# their own: they keep E2B's wire names, which proto/'s lint refuses.
E2B_PROTO  ?= orchestrator/door/e2bapi/envdproto

# The Python client's stubs (clients/python), generated with Debian's protoc
# 3.21 and grpc_python_plugin to match Debian's python3-protobuf and
# python3-grpcio (PyPI is not used).
PY_CLIENT       := clients/python
PY_GEN          := $(PY_CLIENT)/sandboxd/_gen
PY_DEB_PACKAGES := protobuf-compiler protobuf-compiler-grpc python3-grpcio python3-protobuf

# Any Go change may affect any binary; go's build cache keeps rebuilds cheap,
# these dependencies just let make skip the go invocation entirely.
GO_SOURCES := $(shell find . -name '*.go' -not -path './.git/*' -not -path './vendor/*' 2>/dev/null) \
              go.mod $(wildcard go.sum)

.PHONY: help build go-build docker base image test fuzz-smoke run proto proto-tools proto-check \
        python-proto python-proto-tools fmt-check bench clean clean-images mcp-conformance-tools \
        envtest-assets kube-node e2b-sdk-tools test-deps test-deps-list test-deps-fetch-list runsc chromium kernel-test-tools npm \
        test-unit

help:
	@echo 'targets:'
	@echo '  build        go build ./... and bin/{sandboxd,sandboxctl,sandbox-driver}'
	@echo '  docker       make sure the Docker daemon is installed and running'
	@echo '  image        build $(IMAGE) (and the offline base $(BASE_IMAGE) if missing)'
	@echo '  envtest-assets  build kube-apiserver and etcd for the Kubernetes tests once into a'
	@echo '               cache and print `export KUBEBUILDER_ASSETS=<dir>` (first build: minutes)'
	@echo '  kube-node    what the real-node Kubernetes tests run: kubelet, kube-scheduler and'
	@echo '               kube-controller-manager built once into a cache (scripts/kube-node-assets.sh),'
	@echo '               and kube-router'"'"'s NetworkPolicy firewall, Debian'"'"'s containerd, CNI plugins,'
	@echo '               iptables and ipset; prints `export KUBE_NODE_ASSETS=<dir>`'
	@echo '  test         go vet + go test (test-deps and the image first; SANDBOX_IMAGE=$(IMAGE)),'
	@echo '               then the escape, fault and load suites'"'"' figures'
	@echo '  test-unit    the unit tier: go test -short (no Docker, image, API server or browser needed)'
	@echo '  test-deps    install what the suites need (root + apt-get; a no-op once done): the targets'
	@echo '               $(TEST_DEPS)'
	@echo '  runsc        make sure dockerd has gVisor'"'"'s runsc, runsc-net and runsc-build registered (builds, reloads dockerd)'
	@echo '  chromium     install Debian'"'"'s chromium and fonts-dejavu-core (the agent'"'"'s browser test)'
	@echo '  kernel-test-tools  install node, acorn, typescript and R (the driver'"'"'s kernel tests)'
	@echo '  npm          install node and npm (for the MCP conformance suite and the E2B SDKs)'
	@echo '  fuzz-smoke   run each go fuzz target for FUZZ_TIME ($(FUZZ_TIME))'
	@echo '  run          build the image and bin/sandboxd only, run it with defaults (RUN_ARGS=... to add flags)'
	@echo '  proto        buf generate + buf lint'
	@echo '  proto-check  fail if generated protobuf code (Go and Python) is stale'
	@echo '  python-proto regenerate the Python client'"'"'s stubs (clients/python, Debian packages)'
	@echo '  python-proto-tools  install Debian'"'"'s protoc, grpc plugin, python3-grpcio and python3-protobuf'
	@echo '  mcp-conformance-tools  install the MCP conformance suite (npm) into $(MCP_CONFORMANCE_DIR)'
	@echo '  e2b-sdk-tools  install the official E2B SDKs (npm, pinned) into $(E2B_SDK_DIR)'
	@echo '  fmt-check    fail if gofmt would change anything'
	@echo '  bench        side-by-side benchmark (cmd/sandbox-bench; BENCH_ARGS=--markdown|--json)'
	@echo '  clean        remove build outputs (clean-images: also the docker images)'

# ---------------------------------------------------------------- Go binaries
build: go-build $(BIN)/sandboxd $(BIN)/sandboxctl $(BIN)/sandbox-driver

go-build:
	$(GO) build ./...

$(BIN)/sandboxd $(BIN)/sandboxctl: $(GO_SOURCES)
	@mkdir -p $(BIN)
	$(GO) build -o $@ ./cmd/$(@F)

# Runs inside the sandbox image (any distro): static, linux.
$(BIN)/sandbox-driver: $(GO_SOURCES)
	@mkdir -p $(BIN)
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -ldflags='-s -w' -o $@ ./cmd/sandbox-driver

# The io sidecar of the Kubernetes backend, in the same image: static too.
$(BIN)/sandbox-iosidecar: $(GO_SOURCES)
	@mkdir -p $(BIN)
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -ldflags='-s -w' -o $@ ./cmd/sandbox-iosidecar

# Copy into the docker build context (gitignored).
$(IMAGE_DIR)/sandbox-driver: $(BIN)/sandbox-driver
	cp $< $@

$(IMAGE_DIR)/sandbox-iosidecar: $(BIN)/sandbox-iosidecar
	cp $< $@

# --------------------------------------------------------------------- Docker
docker:
	@scripts/ensure-docker.sh

base: docker
	@BASE_IMAGE=$(BASE_IMAGE) scripts/build-base-image.sh

# Docker's layer cache makes an unchanged rebuild take a second or so; a
# driver-only change re-runs just the final COPY layer. The slow apt layer
# only re-runs when the Dockerfile's apt step or the base image changes.
image: base $(IMAGE_DIR)/sandbox-driver $(IMAGE_DIR)/sandbox-iosidecar
	docker build --build-arg BASE_IMAGE=$(BASE_IMAGE) -t $(IMAGE) $(IMAGE_DIR)

# -------------------------------------------------------------------- envtest
# kube-apiserver and etcd, which internal/kubetest runs (through
# controller-runtime's envtest) as a real Kubernetes API server for tests.
# scripts/envtest-assets.sh builds them from Go modules once into a
# versioned cache outside the repository (~/.cache/sandboxd/envtest/k8s-<v>;
# many minutes on two cores the first time) and prints that directory;
# later runs return at once. A KUBEBUILDER_ASSETS already set in the
# environment names another directory and is used as it is. The output is
# a shell line: eval "$$(make -s envtest-assets)" sets it for a go test run
# by hand.
envtest-assets:
	@if [ -n "$${KUBEBUILDER_ASSETS:-}" ]; then dir="$$KUBEBUILDER_ASSETS"; \
	else dir="$$(scripts/envtest-assets.sh)"; fi; \
	for b in kube-apiserver etcd; do \
		[ -x "$$dir/$$b" ] || { echo "envtest-assets: $$dir/$$b is missing" >&2; exit 1; }; \
	done; \
	echo "export KUBEBUILDER_ASSETS=$$dir"

# The real-node Kubernetes tests (internal/kubetest/node) run the kubelet,
# kube-scheduler and kube-controller-manager at the API server's version,
# built from Go modules once into a versioned cache outside the repository
# by scripts/kube-node-assets.sh (a few minutes when kube-apiserver's
# packages are in Go's build cache), with Debian's containerd (its CRI
# plugin) and CNI plugins, and kube-router's NetworkPolicy firewall (iptables
# and ipset). Like envtest-assets, it prints a shell line.
KUBE_NODE_DEBS := containerd containernetworking-plugins iptables ipset

kube-node:
	@scripts/ensure-debs.sh --no-install-recommends kube-node $(KUBE_NODE_DEBS) >&2
	@if [ -n "$${KUBE_NODE_ASSETS:-}" ]; then dir="$$KUBE_NODE_ASSETS"; \
	else dir="$$(scripts/kube-node-assets.sh)"; fi; \
	for b in kubelet kube-scheduler kube-controller-manager kube-router-v2.1.0; do \
		[ -x "$$dir/$$b" ] || { echo "kube-node: $$dir/$$b is missing" >&2; exit 1; }; \
	done; \
	echo "export KUBE_NODE_ASSETS=$$dir"

# ----------------------------------------------------------------- Test / run
# The escape, fault and load suites (e2e/) append one line of
# figures each to this file, printed at the end: go test shows the output
# of passing tests only with -v.
SUITE_SUMMARY := $(abspath $(BIN))/suite-summary.txt

# The tests run as shards, go test processes side by side, a few at a
# time, each with a timeout of its own (scripts/test-shards.sh says which
# and why); each shard's output is printed whole as it ends, then each
# shard's time and the slowest tests.
#
# With SANDBOXD_FAULT_DOCKERD=1 (CI sets it) the fault suite also restarts
# the Docker daemon under a running sandbox. That disturbs every container on
# the machine, so it runs on its own, after all other tests, and never inside
# the shards, which run side by side.
#
# test-deps (below) installs what the suites need first; each of its targets
# is a quick no-op once done. KUBEBUILDER_ASSETS points the Kubernetes tests
# (internal/kubetest) at the binaries envtest-assets built (asking the script
# again returns at once).
#
# CGO_ENABLED=0 (set by make test, not by a bare go test): the suites build
# sandboxd, sandbox-cni and the deployed image's binary as static programs,
# and with cgo off the tests' own packages are the same compile actions, so
# Go's build cache compiles each package once, not once per setting (on a
# new machine the second compile of sandboxd's dependencies took minutes).
# Nothing in the module uses cgo.
test: export CGO_ENABLED := 0
test: test-deps image
	$(GO) vet ./...
	@mkdir -p $(BIN) && rm -f $(SUITE_SUMMARY)
	@rc=0; \
	export KUBEBUILDER_ASSETS="$${KUBEBUILDER_ASSETS:-$$(scripts/envtest-assets.sh)}"; \
	export KUBE_NODE_ASSETS="$${KUBE_NODE_ASSETS:-$$(scripts/kube-node-assets.sh)}"; \
	SANDBOXD_SUITE_SUMMARY=$(SUITE_SUMMARY) SANDBOXD_FAULT_DOCKERD= GO=$(GO) \
		scripts/test-shards.sh $(BIN)/test || rc=$$?; \
	if [ "$${SANDBOXD_FAULT_DOCKERD:-}" = 1 ]; then \
		echo "test: restarting dockerd under running sandboxes (SANDBOXD_FAULT_DOCKERD=1), alone"; \
		SANDBOXD_SUITE_SUMMARY=$(SUITE_SUMMARY) \
			$(GO) test -count=1 -timeout 15m -run '^TestFaultDockerdRestart$$' ./e2e || rc=$$?; \
	fi; \
	if [ -s $(SUITE_SUMMARY) ]; then echo "suite figures:"; sed 's/^/    /' $(SUITE_SUMMARY); fi; \
	exit $$rc

# The unit tier, for a quick loop and for machines without Docker: -short
# skips every test that needs a real part (internal/testenv decides: the
# Docker engine, the image, an API server, a node, Chromium, the SDKs), so
# what runs is each layer's own tests with its fakes.
test-unit:
	$(GO) test -short -count=1 ./...

# Fuzzing: every Fuzz function of every package for FUZZ_TIME in turn; a
# failing input is written under the package's testdata/fuzz/ and fails the
# target (scripts/fuzz-smoke.sh, which also says why one failure is retried).
FUZZ_TIME ?= 10s

fuzz-smoke:
	@GO=$(GO) FUZZ_TIME=$(FUZZ_TIME) scripts/fuzz-smoke.sh

# Only what it runs: sandboxd and the image (which builds the driver and the
# io sidecar it holds); `make build` compiles the whole module.
run: image $(BIN)/sandboxd
	./$(BIN)/sandboxd $(RUN_ARGS)

# The side-by-side benchmark (cmd/sandbox-bench, results in BENCHMARKS.md)
# against a sandboxd it starts itself with a temporary state directory.
# BENCH_ARGS adds flags, e.g. BENCH_ARGS=--markdown or smaller sizes.
bench: image $(BIN)/sandboxd
	$(GO) run ./cmd/sandbox-bench --sandboxd $(BIN)/sandboxd --image $(IMAGE) $(BENCH_ARGS)

fmt-check:
	@out="$$(gofmt -l .)"; \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

# ---------------------------------------------------------------------- Proto
# Installs buf and the plugins into $(GOBIN_DIR) unless the pinned versions
# are already first on PATH. buf is buf's own release binary, from its npm
# package (@bufbuild/buf's per-platform package, into a cache outside the
# repository, linked from $(GOBIN_DIR)): building it from its module took
# about two minutes of a new machine's CI. Where npm is missing or has no
# binary for the platform, it is built from the module as before.
BUF_NPM_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/sandboxd/npm/buf-$(BUF_VERSION)

proto-tools:
	@want="$(patsubst v%,%,$(BUF_VERSION))"; \
	if [ "$$(buf --version 2>/dev/null)" != "$$want" ]; then \
		echo "installing buf $(BUF_VERSION)"; \
		bin=; \
		if command -v npm >/dev/null && \
			npm install --prefix "$(BUF_NPM_DIR)" --no-audit --no-fund --ignore-scripts --save-exact "@bufbuild/buf@$$want" >/dev/null; then \
			for b in "$(BUF_NPM_DIR)"/node_modules/@bufbuild/buf-linux-*/bin/buf; do \
				[ -x "$$b" ] && [ "$$("$$b" --version 2>/dev/null)" = "$$want" ] && bin="$$b" && break; \
			done; \
		fi; \
		if [ -n "$$bin" ]; then mkdir -p "$(GOBIN_DIR)" && ln -sf "$$bin" "$(GOBIN_DIR)/buf"; \
		else $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION); fi; \
	fi
	@[ "$$(protoc-gen-go --version 2>/dev/null)" = "protoc-gen-go $(PROTOC_GEN_GO_VERSION)" ] || \
		{ echo "installing protoc-gen-go $(PROTOC_GEN_GO_VERSION)"; $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION); }
	@[ "$$(protoc-gen-go-grpc --version 2>/dev/null)" = "protoc-gen-go-grpc $(patsubst v%,%,$(PROTOC_GEN_GO_GRPC_VERSION))" ] || \
		{ echo "installing protoc-gen-go-grpc $(PROTOC_GEN_GO_GRPC_VERSION)"; $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION); }
	@[ "$$(protoc-gen-connect-go --version 2>/dev/null)" = "$(patsubst v%,%,$(PROTOC_GEN_CONNECT_GO_VERSION))" ] || \
		{ echo "installing protoc-gen-connect-go $(PROTOC_GEN_CONNECT_GO_VERSION)"; $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_GO_VERSION); }

proto: proto-tools
	cd $(BUF_DIR) && buf generate
	cd $(BUF_DIR) && buf lint
	cd $(E2B_PROTO) && buf generate

# Regenerates and compares with the working tree as it was (rather than with
# git's index), so it works the same in a fresh clone, before the first commit
# and with local edits: it fails when the generated code in $(PROTO_OUT)/
# differs from what buf produces, including files buf produces that are
# missing. The regenerated files are left in place, ready to commit.
proto-check: proto-tools python-proto-tools
	@snap="$$(mktemp -d)"; trap 'rm -rf "$$snap" "$$snap.diff"' EXIT; \
	cp -a $(PROTO_OUT)/. "$$snap/"; \
	$(MAKE) --no-print-directory proto; \
	if ! diff -r "$$snap" $(PROTO_OUT) >"$$snap.diff" 2>&1; then \
		echo "proto-check: generated code in $(PROTO_OUT)/ is stale; run 'make proto' and commit the result:"; \
		cat "$$snap.diff"; \
		exit 1; \
	fi; \
	echo "proto-check: ok"
	@snap="$$(mktemp -d)"; trap 'rm -rf "$$snap" "$$snap.diff"' EXIT; \
	cp -a $(E2B_PROTO)/. "$$snap/"; \
	(cd $(E2B_PROTO) && buf generate); \
	if ! diff -r "$$snap" $(E2B_PROTO) >"$$snap.diff" 2>&1; then \
		echo "proto-check: generated code in $(E2B_PROTO)/ is stale; run 'make proto' and commit the result:"; \
		cat "$$snap.diff"; \
		exit 1; \
	fi; \
	echo "proto-check: e2b ok"
	@snap="$$(mktemp -d)"; trap 'rm -rf "$$snap"' EXIT; \
	$(PY_CLIENT)/generate.sh "$$snap/_gen"; \
	if ! diff -r -x __pycache__ "$$snap/_gen" $(PY_GEN) >"$$snap/diff" 2>&1; then \
		echo "proto-check: the Python stubs in $(PY_GEN)/ are stale; run 'make python-proto' and commit the result:"; \
		cat "$$snap/diff"; \
		exit 1; \
	fi; \
	echo "proto-check: python ok"

# Installs Debian's protoc, grpc_python_plugin, python3-grpcio and
# python3-protobuf when one is missing (as root, with apt-get), then checks
# that Debian's python3, which the client's tests (go test ./clients/python)
# run, imports them.
python-proto-tools:
	@scripts/ensure-debs.sh python-proto-tools $(PY_DEB_PACKAGES)
	@/usr/bin/python3 -c 'import grpc, google.protobuf; print("python-proto-tools: python3-grpcio", grpc.__version__, "python3-protobuf", google.protobuf.__version__)'

python-proto: python-proto-tools
	$(PY_CLIENT)/generate.sh $(PY_GEN)

# --------------------------------------------------------- Test prerequisites
# What make test's suites need besides Go and the image, one target each so
# each can be run alone. Each checks first and returns at once when what it
# stands for is in place; otherwise it installs it: Debian packages with
# apt-get as root (scripts/ensure-debs.sh, which fails naming the packages
# when there is no root or apt-get), npm packages into a cache outside the
# repository, kube-apiserver and etcd built once. Without them the suites
# concerned skip, and under CI=true they fail. .ci/run runs each as a step of
# its own, so that a slow one shows in its summary: the builds
# (test-deps-list: Docker first, then what compiles, bound by the CPU) in
# turn, and the downloads (test-deps-fetch-list: Debian packages and npm,
# bound by the network and the disk) in the background beside them.
# ensure-debs.sh serialises the apt-gets of both.
TEST_DEPS_BUILD := docker runsc python-proto-tools envtest-assets kube-node
TEST_DEPS_FETCH := chromium kernel-test-tools npm mcp-conformance-tools e2b-sdk-tools
TEST_DEPS := $(TEST_DEPS_BUILD) $(TEST_DEPS_FETCH)

test-deps: $(TEST_DEPS)

test-deps-list:
	@echo $(TEST_DEPS_BUILD)

test-deps-fetch-list:
	@echo $(TEST_DEPS_FETCH)

# gVisor registered with dockerd thrice (the escape, fault, load, hostile-/io
# and network suites run under it too), one runsc built once from gVisor's
# Go module on the systrap platform, with three sets of flags: runsc
# (--network=none) for sealed sandboxes, runsc-net (--network=sandbox) for
# networked ones, runsc-build (--network=sandbox --overlay2=none) for
# template builds' steps. scripts/ensure-runsc.sh builds the binary if
# missing, registers what is missing or different with `runsc install` and
# reloads dockerd's configuration (SIGHUP, no restart).
runsc: docker
	@scripts/ensure-runsc.sh

# Debian's Chromium, which the agent's browser test drives (chromedp); any of
# the names internal/testenv looks for will do.
CHROMIUM_DEBS := chromium fonts-dejavu-core

chromium:
	@have() { command -v chromium || command -v chromium-browser || command -v google-chrome; }; \
	have >/dev/null || scripts/ensure-debs.sh --no-install-recommends chromium $(CHROMIUM_DEBS); \
	bin="$$(have)" || { echo "chromium: no chromium binary after installing $(CHROMIUM_DEBS)" >&2; exit 1; }; \
	echo "chromium: $$("$$bin" --version 2>/dev/null || echo "$$bin")"

# The host's Node.js (with the acorn parser and the TypeScript compiler) and
# R, with which the driver's kernel tests (driver/languages_test.go) run its
# kernels: the same Debian packages the image has. The check looks where the
# driver does (driver/languages.go).
KERNEL_TEST_DEBS := nodejs node-acorn node-typescript r-base-core
NODE_MODULE_DIRS := /usr/share/nodejs /usr/lib/nodejs /usr/local/lib/node_modules /usr/lib/node_modules

kernel-test-tools:
	@module() { for d in $(NODE_MODULE_DIRS); do [ -f "$$d/$$1/package.json" ] && return 0; done; return 1; }; \
	have() { { command -v node || command -v nodejs; } >/dev/null && command -v Rscript >/dev/null && module acorn && module typescript; }; \
	have || scripts/ensure-debs.sh --no-install-recommends kernel-test-tools $(KERNEL_TEST_DEBS); \
	have || { echo "kernel-test-tools: node, acorn, typescript or Rscript still missing after installing $(KERNEL_TEST_DEBS)" >&2; exit 1; }; \
	echo "kernel-test-tools: node $$("$$(command -v node || command -v nodejs)" --version), $$(Rscript --version 2>&1)"

# node, npm and npx, with which the MCP conformance suite and the E2B SDKs are
# installed and run.
npm:
	@{ command -v npm && command -v npx && command -v node; } >/dev/null || \
		scripts/ensure-debs.sh --no-install-recommends npm nodejs npm; \
	{ command -v npm && command -v npx && command -v node; } >/dev/null || \
		{ echo "npm: node, npm or npx still missing after installing nodejs and npm" >&2; exit 1; }; \
	echo "npm: npm $$(npm --version), node $$(node --version)"

# ------------------------------------------------------------ MCP conformance
# The MCP project's conformance suite, which cmd/sandbox-mcp's
# conformance_test.go runs against sandbox-mcp --http. It is installed with
# npm into a cache outside the repository, one directory per version, and
# only when missing; the test finds it there (MCP_CONFORMANCE_DIR).
MCP_CONFORMANCE_VERSION ?= 0.1.10
MCP_CONFORMANCE_DIR     ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/sandboxd/npm/conformance-$(MCP_CONFORMANCE_VERSION)
export MCP_CONFORMANCE_DIR

mcp-conformance-tools: npm
	@if [ -x "$(MCP_CONFORMANCE_DIR)/node_modules/.bin/conformance" ]; then \
		echo "mcp-conformance-tools: conformance $(MCP_CONFORMANCE_VERSION) in $(MCP_CONFORMANCE_DIR)"; \
	else \
		mkdir -p "$(MCP_CONFORMANCE_DIR)"; \
		npm install --prefix "$(MCP_CONFORMANCE_DIR)" --no-audit --no-fund @modelcontextprotocol/conformance@$(MCP_CONFORMANCE_VERSION); \
	fi

# ------------------------------------------------------------------ E2B SDKs
# The official E2B SDKs (npm "e2b" and "@e2b/code-interpreter", pinned),
# which orchestrator/door/e2bapi's TestSDK runs unmodified against a real
# sandboxd --e2b-listen. Installed with npm into a cache outside the
# repository, one directory per version pair, only when missing. Then node
# must load them as the suites do (sdktest/helpers.mjs requires them): they
# ask for a newer node than Debian 12's (18), which fails to, and the target
# fails saying so rather than leave the suites to fail.
E2B_SDK_VERSION    ?= 2.51.0
E2B_CI_SDK_VERSION ?= 2.8.0
E2B_SDK_DIR        ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/sandboxd/npm/e2b-$(E2B_SDK_VERSION)-ci-$(E2B_CI_SDK_VERSION)
export E2B_SDK_DIR

e2b-sdk-tools: npm
	@if [ -f "$(E2B_SDK_DIR)/node_modules/e2b/package.json" ] && [ -f "$(E2B_SDK_DIR)/node_modules/@e2b/code-interpreter/package.json" ]; then \
		echo "e2b-sdk-tools: e2b $(E2B_SDK_VERSION), @e2b/code-interpreter $(E2B_CI_SDK_VERSION) in $(E2B_SDK_DIR)"; \
	else \
		mkdir -p "$(E2B_SDK_DIR)"; \
		npm install --prefix "$(E2B_SDK_DIR)" --no-audit --no-fund --save-exact \
			e2b@$(E2B_SDK_VERSION) @e2b/code-interpreter@$(E2B_CI_SDK_VERSION); \
	fi
	@err="$$(node -e 'const r = require("node:module").createRequire(process.argv[1] + "/node_modules/"); \
		try { r("e2b"); r("@e2b/code-interpreter") } catch (e) { console.log(String(e.message).split("\n")[0]); process.exit(1) }' \
		"$(E2B_SDK_DIR)")" || { \
		echo "e2b-sdk-tools: node $$(node --version) cannot load the E2B SDKs in $(E2B_SDK_DIR): $$err" >&2; \
		echo "e2b-sdk-tools: they ask for node $$(node -p 'require(process.argv[1] + "/node_modules/e2b/package.json").engines.node' "$(E2B_SDK_DIR)"); install a newer Node.js and re-run" >&2; \
		exit 1; }

# ---------------------------------------------------------------------- Clean
clean:
	rm -rf $(BIN) $(IMAGE_DIR)/sandbox-driver $(IMAGE_DIR)/sandbox-iosidecar

clean-images:
	-docker image rm $(IMAGE) $(BASE_IMAGE)
