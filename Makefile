# Two entry points (see README): `make run` serves the API, `make test` runs the whole suite.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
HOST ?= 127.0.0.1

.PHONY: run test lint install install-dev bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[dev,profile,export-test,viewer-test]'
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

run: install
	$(BIN)/partitura db upgrade
	$(BIN)/partitura serve --host $(HOST) --port $(PORT)

test: install-dev lint
	$(BIN)/python -m pytest

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: install
	$(BIN)/python bench/accuracy.py
	$(BIN)/python bench/error_bands.py
	$(BIN)/python bench/vtrain_single.py
	$(BIN)/python bench/memory.py
	$(BIN)/python bench/search.py
	$(BIN)/python bench/plan_quality.py
	$(BIN)/python bench/cli.py
	$(BIN)/python bench/sweep.py
	$(MAKE) --no-print-directory install-dev && $(BIN)/python bench/load.py  # its client is httpx, a dev extra

clean:
	rm -rf $(VENV)
