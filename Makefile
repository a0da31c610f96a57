# Everything a fresh machine with Python 3 and make needs: a virtualenv, the provider, its tools.
PYTHON ?= python3
VENV ?= .venv
AIRFLOW_VERSION ?= 3.3.2
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(AIRFLOW_VERSION)
# The versions of every dependency this Airflow release was last proven with (`uv pip freeze` of a green CI
# run): a release made on PyPI after that cannot break a fresh install (cryptography 51 broke Airflow 2.11's
# Fernet). `make CONSTRAINTS=` installs the newest instead.
CONSTRAINTS ?= $(wildcard constraints/airflow-$(AIRFLOW_VERSION).txt)
PIN := $(if $(CONSTRAINTS),-c $(CONSTRAINTS))
PYTEST_ARGS ?=
# `make test` runs the suites in two parts, each spread over TEST_WORKERS pytest-xdist processes (most tests
# wait on jobs, poll intervals and MinJobAge, not on the CPU): first what needs no real Slurm, which fails
# fast; then real Slurm and the `airflow standalone` suites. Each part can run alone: `make test-fast`,
# `make test-slurm`. TEST_WORKERS=0 runs a part in one process.
TEST_WORKERS ?= 4
FAST_TESTS ?= tests/unit tests/emulator tests/integration
SLURM_TESTS ?= tests/real_slurm tests/standalone tests/deployment
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS))

.PHONY: install demo test test-fast test-slurm lint typecheck unit docs clean

$(STAMP): pyproject.toml Makefile $(CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip uv
	$(BIN)/uv pip install -q --python $(BIN)/python $(PIN) -e ".[dev,emulator,openlineage,staging]" "apache-airflow==$(AIRFLOW_VERSION)"
	touch $@

install: $(STAMP)

demo: install
	$(BIN)/python example_dags/demo.py

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy

# The user documentation (Sphinx), warnings as errors: docs/_build/html/index.html.
$(VENV)/.installed-docs: $(STAMP) pyproject.toml
	$(BIN)/uv pip install -q --python $(BIN)/python $(PIN) -e ".[dev,docs,emulator,openlineage,staging]" "apache-airflow==$(AIRFLOW_VERSION)"
	touch $@

docs: $(VENV)/.installed-docs
	$(BIN)/sphinx-build -E -W --keep-going -q -b html docs docs/_build/html

# What needs no real Slurm (unit, emulator, integration: ~5 min with 4 workers). Which tests share a worker:
# tests/conftest.py (xdist_scope).
test-fast: install
	$(BIN)/pytest $(XDIST) $(FAST_TESTS) $(PYTEST_ARGS)

# Real Slurm (tests/real_slurm, ~17 min: all on one worker, in order, since they share one cluster) beside
# the standalone suites (~7 min, on another worker, one `airflow standalone` at a time); tests/conftest.py
# groups them.
test-slurm: install
	$(BIN)/pytest $(XDIST) $(SLURM_TESTS) $(PYTEST_ARGS)

test: lint typecheck
	$(MAKE) --no-print-directory test-fast
	$(MAKE) --no-print-directory test-slurm

clean:
	rm -rf $(VENV) .airflow-test .mypy_cache .ruff_cache docs/_build
