# Samsa: `make demo` and `make test` work from a fresh clone.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup demo test test-fast bench bench-peers bench-mirror clean help

help:
	@echo "make setup   create .venv and install Samsa with its test tools"
	@echo "make demo    a broker and the console tools; a ZooKeeper cluster and a consumer group;"
	@echo "             the multi-DC lab: producers behind HAProxy, mirrored into the analysis cluster"
	@echo "make test    run the whole test suite"
	@echo "make bench   run the throughput/latency benchmark (writes bench/RESULTS.md)"
	@echo "make bench-peers  Samsa vs RabbitMQ vs ActiveMQ, the paper's section 5 (installs them)"
	@echo "make lab-up  start the multi-datacenter lab (infra/local/topology.toml) in $(LAB_DIR)/"
	@echo "             LAB_ARGS='--set base_port=29000 --no-mirrors' passes options to up"
	@echo "make lab-status  what the lab runs: processes, brokers, load balancers, mirror lag"
	@echo "make lab-down    stop the lab (PURGE=1 also deletes its logs and data)"
	@echo "make bench-mirror two DCs mirrored into the analysis cluster: throughput, latency"

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
	$(PY) -m infra.local.demo

test: setup
	$(PY) -m pytest -q

test-fast: setup
	$(PY) -m pytest -q -m "not slow"

bench: setup
	$(PY) bench/run.py

bench-mirror: setup
	$(PY) bench/mirror_bench.py

# the peers extra (pika, stomp.py, matplotlib) stays out of the test install
PEERS_STAMP := $(VENV)/.peers-installed
$(PEERS_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[test,bench,peers]'
	@touch $(PEERS_STAMP)

bench-peers: setup $(PEERS_STAMP)
	@scripts/ensure-peer-packages.sh
	$(PY) bench/peers.py

# The multi-datacenter lab (docs/multi-dc.md); its processes outlive make.
LAB_DIR  ?= .lab
LAB_ARGS ?=

lab-up: setup
	$(PY) -m infra.local up --dir $(LAB_DIR) $(LAB_ARGS)

lab-status: setup
	$(PY) -m infra.local status --dir $(LAB_DIR)

lab-down: setup
	$(PY) -m infra.local down --dir $(LAB_DIR) $(if $(PURGE),--purge)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
