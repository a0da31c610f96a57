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

.PHONY: install demo test lint typecheck unit docs clean

$(STAMP): pyproject.toml Makefile $(CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip uv
	$(BIN)/uv pip install -q --python $(BIN)/python $(PIN) -e ".[dev]" "apache-airflow==$(AIRFLOW_VERSION)"
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
	$(BIN)/uv pip install -q --python $(BIN)/python $(PIN) -e ".[dev,docs]" "apache-airflow==$(AIRFLOW_VERSION)"
	touch $@

docs: $(VENV)/.installed-docs
	$(BIN)/sphinx-build -E -W --keep-going -q -b html docs docs/_build/html

test: lint typecheck
	$(BIN)/pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .airflow-test .mypy_cache .ruff_cache docs/_build
