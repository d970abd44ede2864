# Samsa: `make demo` and `make test` work from a fresh clone.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup demo test test-fast bench clean help

help:
	@echo "make setup   create .venv and install Samsa with its test tools"
	@echo "make demo    start a broker, produce and consume through the console tools"
	@echo "make test    run the whole test suite"
	@echo "make bench   run the throughput/latency benchmark (writes bench/RESULTS.md)"

setup: $(STAMP)

$(STAMP): pyproject.toml setup.py scripts/ensure-system-packages.sh
	@scripts/ensure-system-packages.sh
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Samsa needs Python >= 3.11")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,bench]'
	@touch $(STAMP)

demo: setup
	$(PY) -m broker.demo

test: setup
	$(PY) -m pytest -q

test-fast: setup
	$(PY) -m pytest -q -m "not slow"

bench: setup
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
