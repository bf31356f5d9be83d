# metrics-sched: `make demo` to try it, `make test` to test it. Both install what they need.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
PYTEST_ARGS ?=
# `make test`'s pytest workers (pytest-xdist): tests/conftest.py hands each e2e module whole to a free worker, each
# worker with a dev cluster of its own, and the unit tests fill in at the end. 0: one process, no xdist.
TEST_WORKERS ?= 2

.PHONY: deps deps-system deps-python control-plane test test-unit test-e2e test-matrix test-conformance lint demo bench bench-quick image clean

deps: deps-system deps-python

# Debian's Prometheus (the dev cluster runs it). Go must already be on the machine (>= 1.26).
deps-system:
	@command -v prometheus >/dev/null 2>&1 || { \
	  echo "[deps] installing Debian's prometheus package"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
	@command -v go >/dev/null 2>&1 || { echo "error: Go >= 1.26 is required to build the control plane" >&2; exit 1; }

deps-python: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@echo "[deps] creating $(VENV) and installing metrics-sched with dev extras"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -e '.[dev,bench]'
	@touch $@

control-plane: deps
	@$(BIN)/metrics-sched devcluster build

test: deps control-plane
	@$(BIN)/pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

test-unit: deps-python
	@$(BIN)/pytest -m unit $(PYTEST_ARGS)

test-e2e: deps control-plane
	@$(BIN)/pytest -m e2e $(PYTEST_ARGS)

# The e2e suite against each further Kubernetes version of deploy/local/versions.toml (`kubernetes_matrix`);
# `make test` covers the default one. Each version builds once into a cache dir of its own.
test-matrix: deps
	@versions=$$($(BIN)/metrics-sched devcluster versions --matrix) || exit 2; \
	test -n "$$versions" || { echo "error: no kubernetes_matrix in deploy/local/versions.toml" >&2; exit 2; }; \
	for v in $$versions; do \
	  echo "[test-matrix] e2e suite against Kubernetes v$$v"; \
	  $(BIN)/metrics-sched devcluster build --kubernetes $$v || exit 1; \
	  METRICS_SCHED_KUBERNETES=$$v $(BIN)/pytest -m e2e $(PYTEST_ARGS) || exit 1; \
	done

# Upstream's [sig-scheduling] e2e specs (test/e2e/scheduling of the dev cluster's Kubernetes) against metrics-sched
# as the only scheduler; prints a pass/fail table. ~8 min, not part of `make test`; see docs/conformance.md.
test-conformance: deps control-plane
	@$(BIN)/metrics-sched devcluster conformance $(CONFORMANCE_ARGS)

lint: deps-python
	@$(BIN)/ruff check metrics_sched adapters devcluster tests bench grafana
	@$(BIN)/mypy --strict metrics_sched adapters devcluster
	@$(BIN)/lint-imports
	@$(PY) grafana/build_configmap.py --check
	@$(PY) -m metrics_sched.config.reference --check docs/configuration.md

demo: deps
	@$(BIN)/metrics-sched demo

bench-quick: deps control-plane
	@$(PY) -m bench.run --quick

bench: deps control-plane
	@$(PY) -m bench.run

# The scheduler's image from deploy/Containerfile (base pinned by digest, dependencies from deploy/image/*.lock
# with hashes), with podman, buildah or docker where one can build; else a message and exit 2. IMAGE=name:tag.
image:
	@deploy/image/build.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
