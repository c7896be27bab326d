# The two commands: `make demo` and `make test`. Both install what is missing first.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.sealtrace-installed
PACKAGES := -p sealtrace.proxy -p sealtrace.sandbox -p sealtrace.agent -p sealtrace.server -p sealtrace._engine
NATIVE := $(wildcard native/CMakeLists.txt native/src/* native/src/*/* native/_engine.pyi)

.PHONY: help setup podman lint typecheck test tier demo up bench clean

help:
	@echo "make demo   - the £0.00 story: sealed into local S3, replayed, traced; then again through"
	@echo "              the server, an agent and the sandbox (everything stopped afterwards)"
	@echo "make up     - the platform on loopback (Redis, moto, server, agents, web console) until Ctrl-C"
	@echo "make test   - lint, type-check and run every test tier (installs what is missing)"
	@echo "make tier TIER=integration|podman|e2e|slow|install|browser - one pytest tier"
	@echo "make bench  - sealing, recorder overhead, engine cost, sandbox and session start (bench/results/)"

$(STAMP): pyproject.toml $(NATIVE)
	infra/local/bootstrap.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,server,agent]'
	touch $@

# The package is installed editable, so nothing compiles its bytecode as a wheel's install
# would; where PYTHONDONTWRITEBYTECODE is set, every process (each replay pass is one) would
# compile sealtrace from source at start. Compiled here once (a no-op when up to date).
setup: $(STAMP)
	infra/local/typecheck-tree.sh
	$(BIN)/python -m compileall -q -j 0 proxy sandbox agent server > /dev/null

podman:
	infra/local/podman-setup.sh

lint: setup
	$(BIN)/python infra/local/check-seams.py
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	infra/local/clang-format-check.sh

typecheck: setup
	$(BIN)/mypy $(PACKAGES)

# Most tests wait on subprocesses, containers and a browser: three workers keep two cores
# busy. Each worker starts its own services (moto, PostgreSQL, the Podman API service); a test
# file runs whole on one worker. Tests marked `alone` run after them, by themselves.
TEST_WORKERS ?= 3

test: setup podman lint typecheck
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not alone"
	$(BIN)/python -m pytest -m alone

tier: setup podman
	$(BIN)/python -m pytest -m "$(TIER)"

demo: setup podman
	PATH="$(CURDIR)/$(BIN):$$PATH" infra/local/demo.sh
	$(BIN)/python infra/local/stack.py demo

up: setup podman
	$(BIN)/python infra/local/stack.py up

bench: setup
	$(BIN)/python bench/seal.py
	$(BIN)/python bench/record_overhead.py
	$(BIN)/python bench/record_instructions.py
	$(BIN)/python bench/engine.py
	$(BIN)/python bench/engine_instructions.py
	$(BIN)/python bench/sandbox.py
	$(BIN)/python bench/session.py
	$(BIN)/python bench/request_trace.py

clean:
	rm -rf build $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
