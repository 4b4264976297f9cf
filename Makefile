# Two commands do all set-up: `make run` and `make test`. Both are idempotent.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test lint format bench bench-fit bench-stream bench-page bench-window bench-load clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(VENV)/.installed $@

run: $(VENV)/.installed
	$(BIN)/webapp migrate
	$(BIN)/webapp serve --host $(HOST) --port $(PORT)

test: $(VENV)/.installed-test
	$(BIN)/ruff check webapp tests bench
	$(BIN)/pytest -q

lint: $(VENV)/.installed-test
	$(BIN)/ruff check webapp tests bench
	$(BIN)/ruff format --check webapp tests bench

format: $(VENV)/.installed-test
	$(BIN)/ruff format webapp tests bench
	$(BIN)/ruff check --fix webapp tests bench

bench: bench-fit bench-stream bench-page bench-window bench-load

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

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache
