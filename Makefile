# Two entry points (see README): `make run` serves the API, `make test` runs the whole suite.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
HOST ?= 127.0.0.1
# The whole dependency tree pinned with hashes (`make lock` writes both from pyproject.toml):
# requirements.lock the service's, requirements-dev.lock that plus every extra, for the tests.
LOCK := requirements.lock
DEV_LOCK := requirements-dev.lock
# uv resolves the locks; it lives in a venv of its own, never among the project's dependencies.
LOCK_TOOL := .lock-tool
UV_VERSION := 0.13.8
LOCK_ARGS := --generate-hashes --python-version 3.11 --custom-compile-command "make lock" --quiet

.PHONY: run test lint install install-dev bench clean lock

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml $(LOCK)
	$(BIN)/pip install --quiet --require-hashes -r $(LOCK)
	$(BIN)/pip install --quiet --no-deps -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed $(DEV_LOCK)
	$(BIN)/pip install --quiet --require-hashes -r $(DEV_LOCK)
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
	$(BIN)/python bench/microbatch_split.py
	$(BIN)/python bench/step_shares.py
	$(BIN)/python bench/gemm_shapes.py
	$(BIN)/python bench/memory.py
	$(BIN)/python bench/search.py
	$(BIN)/python bench/plan_quality.py
	$(BIN)/python bench/cli.py
	$(BIN)/python bench/sweep.py
	$(MAKE) --no-print-directory install-dev && $(BIN)/python bench/load.py  # its client is httpx, a dev extra

# The dev lock is resolved for Linux x86_64 (torch and triton are); torch is PyTorch's CPU build,
# which the lock finds in /opt/wheels (its first line). The service's lock is universal, held to
# the dev lock's versions so both install the same service. Existing pins are kept: to move one,
# edit pyproject.toml (or delete the lock) and run this again.
$(LOCK_TOOL)/bin/uv:
	$(PYTHON) -m venv $(LOCK_TOOL)
	$(LOCK_TOOL)/bin/pip install --quiet uv==$(UV_VERSION)

lock: $(LOCK_TOOL)/bin/uv
	$(LOCK_TOOL)/bin/uv pip compile pyproject.toml --all-extras $(LOCK_ARGS) \
	    --python-platform x86_64-manylinux_2_28 --find-links /opt/wheels --emit-find-links -o $(DEV_LOCK)
	$(LOCK_TOOL)/bin/uv pip compile pyproject.toml $(LOCK_ARGS) --universal -c $(DEV_LOCK) -o $(LOCK)

clean:
	rm -rf $(VENV) $(LOCK_TOOL)
