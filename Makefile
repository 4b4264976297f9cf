# Two commands do all set-up: `make run` and `make test`. Both are idempotent.
# They install the exact versions, hash-checked, of requirements.lock (to run) and
# requirements-test.lock (to test); `make lock` regenerates both from pyproject.toml.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
PIP_VERSION := 26.3
PIP_TOOLS_VERSION := 7.6.2
LOCK_VENV := .venv-lock
# `make lock LOCK_FLAGS=--upgrade` moves every pin to the newest release; without it,
# pins already in the lock files are kept and only what pyproject.toml changed moves.
LOCK_FLAGS ?=
COMPILE := $(LOCK_VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe \
	--strip-extras --no-emit-index-url --no-emit-find-links --build-deps-for=editable \
	$(LOCK_FLAGS)

.PHONY: run test lint format lock bench bench-fit bench-stream bench-page bench-window bench-load bench-cache bench-statements bench-files bench-exports bench-tools clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet pip==$(PIP_VERSION)

# The lock holds every dependency and the build backend, so the project itself goes in
# without either; `pip check` then stops a lock older than pyproject.toml's dependencies.
define install_locked
	$(BIN)/pip install --quiet --require-hashes -r $(1)
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/pip check
endef

$(VENV)/.installed: requirements.lock pyproject.toml | $(BIN)/python
	$(call install_locked,requirements.lock)
	touch $@

$(VENV)/.installed-test: requirements-test.lock pyproject.toml | $(BIN)/python
	$(call install_locked,requirements-test.lock)
	touch $(VENV)/.installed $@

$(LOCK_VENV)/bin/pip-compile:
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install --quiet pip==$(PIP_VERSION) pip-tools==$(PIP_TOOLS_VERSION)

# The test set is constrained by the run set, so both install the same version of
# everything they share.
lock: | $(LOCK_VENV)/bin/pip-compile
	$(COMPILE) --output-file requirements.lock pyproject.toml
	$(COMPILE) --extra test --constraint requirements.lock \
		--output-file requirements-test.lock pyproject.toml

run: $(VENV)/.installed
	$(BIN)/webapp migrate
	$(BIN)/webapp serve --host $(HOST) --port $(PORT)

# mypy reads its files and strictness from pyproject.toml ([tool.mypy]).
# The suite runs on two processes (pytest-xdist, `--dist load`): each takes the next tests
# in collection order as it frees up, so a process meets a file's tests (and the browser
# package's, collected first) in one stretch and starts their servers and Chromium once,
# and the two end within a test of each other (docs/development.md). `TEST_WORKERS=0
# make test` runs it in this process alone, `TEST_WORKERS=auto` on every core.
TEST_WORKERS ?= 2
test: $(VENV)/.installed-test
	$(BIN)/ruff check webapp tests bench
	$(BIN)/mypy
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist load

lint: $(VENV)/.installed-test
	$(BIN)/ruff check webapp tests bench
	$(BIN)/ruff format --check webapp tests bench
	$(BIN)/mypy

format: $(VENV)/.installed-test
	$(BIN)/ruff format webapp tests bench
	$(BIN)/ruff check --fix webapp tests bench

bench: bench-fit bench-stream bench-page bench-window bench-load bench-cache bench-statements bench-files bench-exports bench-tools

bench-fit: $(VENV)/.installed-test
	$(BIN)/python -m bench.fit_and_load

bench-stream: $(VENV)/.installed-test
	$(BIN)/python -m bench.stream_overhead

bench-page: $(VENV)/.installed-test
	$(BIN)/python -m bench.page_render

bench-window: $(VENV)/.installed-test
	$(BIN)/python -m bench.window_fill

bench-load: $(VENV)/.installed-test
	$(BIN)/python -m bench.load

bench-cache: $(VENV)/.installed-test
	$(BIN)/python -m bench.cache
	$(BIN)/python -m bench.slots

bench-statements: $(VENV)/.installed-test
	$(BIN)/python -m bench.statements

bench-files: $(VENV)/.installed-test
	$(BIN)/python -m bench.files

bench-exports: $(VENV)/.installed-test
	$(BIN)/python -m bench.exports

bench-tools: $(VENV)/.installed-test
	$(BIN)/python -m bench.tools

clean:
	rm -rf $(VENV) $(LOCK_VENV) var .pytest_cache .ruff_cache
