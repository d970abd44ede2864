# Samsa: `make demo` and `make test` work from a fresh clone.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
CHECKOV := .venv-checkov/bin/checkov

# plain `make` prints the help (every target is listed there: tests/test_makefile.py)
.DEFAULT_GOAL := help

.PHONY: demo-down demo-broker demo-lab drill drill-network drill-loss lab-up lab-status lab-down
.PHONY: setup demo test test-images test-fast test-asan bench bench-peers bench-mirror bench-audit bench-loader bench-freshness bench-scale bench-containers bench-replication bench-network bench-mirror-wan bench-tls bench-scram bench-startup images images-down push-images \
	airflow-up airflow-status airflow-down tf-local-up tf-local-down clean help

# make test requires the C accelerator wherever it can be built (a compiler
# exists): a missing one then fails the suite instead of skipping
REQUIRE_SPEEDUPS := $(shell command -v cc >/dev/null 2>&1 && echo 1 || echo 0)

help:
	@echo "make help    this list (plain make prints it too)"
	@echo "make setup   create .venv and install Samsa with its test tools and the samsa command"
	@echo "             (.venv/bin/samsa --help: every service and tool, docs/operations.md)"
	@echo "make demo    the whole pipeline: two datacenters behind HAProxy, the mirror into analysis,"
	@echo "             the audit, Airflow loading Parquet hour by hour, a summary (DEMO_ARGS=--keep-up)"
	@echo "make demo-down  stop a demo left up; make demo-broker / demo-lab: the smaller demos"
	@echo "make drill   the pipeline under kill -9 of brokers, mirror, counter, loader, ZooKeeper;"
	@echo "             fails if the audit shows any acknowledged message lost; then, as root, the"
	@echo "             network drill (else it says why it is skipped)"
	@echo "make drill-network  the pipeline in network namespaces under a 2-minute cut of dc-a from"
	@echo "             analysis, a broker cut off from ZooKeeper, a mirror cut off from its target,"
	@echo "             one-way loss; fails on any loss (root; NETWORK_DRILL_ARGS=--cut-seconds 20)"
	@echo "make drill-loss  a segment deleted before the mirror copied it: the audit must report"
	@echo "             exactly that loss, and warehouse_load must refuse that hour"
	@echo "make test    build the container images (cached), run the whole test suite (two tests at"
	@echo "             a time, then the serial ones alone; TEST_WORKERS=0: one at a time), stop the"
	@echo "             project's dockerd (SAMSA_CONTAINERS=0: no images, container tests opted out)"
	@echo "make test-images  build the container images make test runs (SAMSA_CONTAINERS=0: none)"
	@echo "make test-fast  the suite without the tests marked slow"
	@echo "make test-asan  the codec's and the audit kernel's tests against the C code built with"
	@echo "             AddressSanitizer and UBSan (in build/asan)"
	@echo "make bench   run the throughput/latency benchmark (writes bench/RESULTS.md)"
	@echo "make bench-peers  Samsa vs RabbitMQ vs ActiveMQ, the paper's section 5 (installs them)"
	@echo "make lab-up  start the multi-datacenter lab (infra/local/topology.toml) in $(LAB_DIR)/"
	@echo "             LAB_ARGS='--set base_port=29000 --no-mirrors' passes options to up"
	@echo "make lab-status  what the lab runs: processes, brokers, load balancers, mirror lag"
	@echo "make lab-down    stop the lab (PURGE=1 also deletes its logs and data)"
	@echo "make bench-mirror two DCs mirrored into the analysis cluster: throughput, latency"
	@echo "make bench-audit  Avro rows/s, the audit's counting consumer, the audited producer"
	@echo "make bench-loader the warehouse loader's rows/s into Parquet (Spark local[2])"
	@echo "make bench-freshness  produce -> audit complete -> Parquet on the demo's pipeline"
	@echo "make images  build the services' container images offline (docs/containers.md)"
	@echo "make images-down  stop the dockerd that make images started"
	@echo "make push-images REGISTRY=host[/path]  push the images the cloud runs, tagged"
	@echo "             VERSION-REVISION (TAG=... to choose; infra/terraform/README.md)"
	@echo "make bench-containers  the containerized pipeline ready, containers vs processes"
	@echo "make bench-replication  replication's produce cost, failover times, re-replication (~3 min)"
	@echo "make bench-network  what the network lab's router carries per MTU and link (root, ~4 min)"
	@echo "make bench-mirror-wan  the mirror's throughput against the WAN's round trip, A/B (root)"
	@echo "make bench-tls         produce and consume through the TLS listener against plaintext, A/B"
	@echo "make bench-scram       connection set-up with SCRAM-SHA-512 against without (and over TLS)"
	@echo "make bench-startup     the demo's start-up secured against open, A/B"
	@echo "make bench-scale  broker cost against partitions, clients, idle consumers, segments, recovery"
	@echo "make airflow-up  a real Airflow (UI on 127.0.0.1:$(AIRFLOW_PORT)) with dags/: warehouse_load,"
	@echo "             audit_report; WAREHOUSE_CONFIG=file names their settings (config/loader.toml)"
	@echo "make airflow-status / airflow-down  its processes and login / stop it"
	@echo "make tf-local-up  terraform apply of infra/terraform/environments/local: the multi-DC"
	@echo "             environment, audit and Airflow as real processes (TF_VARS='-var brokers_per_dc=3')"
	@echo "make tf-local-down  terraform destroy of it"
	@echo "make clean   remove .venv, .venv-checkov, build/, test caches and the codec's built accelerator"

setup: $(STAMP)

$(STAMP): Makefile pyproject.toml setup.py broker/protocol/_speedups.c audit/_tally.c scripts/ensure-system-packages.sh
	@scripts/ensure-system-packages.sh
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Samsa needs Python >= 3.11")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,bench,airflow]'
	@# pip -e may keep an old build of the extension: build it in place from the source
	@$(PY) setup.py --quiet build_ext --inplace 2>/dev/null || true
	@scripts/check-codec.sh $(PY)
	@# checkov checks the Terraform modules in the tests; it downgrades packages the
	@# project needs, so it gets a virtualenv of its own
	@test -x $(CHECKOV) || ($(PYTHON) -m venv .venv-checkov && \
	    .venv-checkov/bin/pip install --quiet 'checkov>=3.2,<4')
	@touch $(STAMP)

# The whole pipeline (infra/local/pipeline.py): two datacenters behind HAProxy,
# the mirror, the audit, Airflow's warehouse load, a summary; stops it all at
# the end unless DEMO_ARGS=--keep-up (then make demo-down).
DEMO_DIR  ?= .demo
DEMO_ARGS ?=

demo: setup
	$(PY) -m infra.local.pipeline up --dir $(DEMO_DIR) $(DEMO_ARGS)

demo-down: setup
	$(PY) -m infra.local.pipeline down --dir $(DEMO_DIR)

# Fault drill (infra/local/drill.py): the pipeline while brokers, a mirror
# process, the audit counter, loader runs and ZooKeeper are killed -9 and
# restarted; exits non-zero if the audit shows any acknowledged message lost.
# Then the network drill (below), where network namespaces can be made (root);
# elsewhere it prints why it is skipped.
DRILL_ARGS ?=
NETWORK_DRILL_ARGS ?=

drill: setup
	$(PY) -m infra.local.drill --dir .drill $(DRILL_ARGS)
	$(PY) -m infra.local.drill_network --dir .drill-network --skip-if-unable $(NETWORK_DRILL_ARGS)

# Network faults (infra/local/drill_network.py): dc-a cut off from analysis,
# a broker cut off from ZooKeeper, a mirror process cut off from its target,
# one-way loss, in the netns lab; exits non-zero if the audit shows a loss.
drill-network: setup
	$(PY) -m infra.local.drill_network --dir .drill-network $(NETWORK_DRILL_ARGS)

# A deliberate loss (infra/local/drill_loss.py): a dc-a segment deleted before
# the mirror copied it; passes only if the audit reports exactly that topic,
# window, tier and count, and warehouse_load refuses that hour.
drill-loss: setup
	$(PY) -m infra.local.drill_loss --dir .drill-loss $(DRILL_ARGS)

# the smaller demos: a broker and the console tools; the multi-DC lab alone
demo-broker: setup
	$(PY) -m broker.demo

demo-lab: setup
	$(PY) -m infra.local.demo $(DEMO_LAB_ARGS)

# The container tests (tests/containers) run the images: they are built first,
# with the layer cache (SAMSA_CONTAINERS=0 opts out: then those tests are
# reported skipped as opted out). A build that fails does not stop the suite:
# the container tests then fail and say why (the images are not this
# checkout's). At the end, pass, fail or Ctrl-C, the project's own dockerd is
# stopped unless containers still run on it (a lab or a Terraform environment
# started as containers): make test leaves no daemon of its own running.
#
# The suite runs in two passes (tests/conftest.py marks the second's):
# the tests not marked serial, TEST_WORKERS at a time (pytest-xdist), then
# the serial ones (slow, or using the machine's Docker engine, network
# namespaces, Airflow) one at a time. Both passes always run; make test
# fails if either failed.
TEST_WORKERS ?= 2

test: setup
	@trap '$(PY) -m infra.docker.engine down-if-idle' EXIT; \
	  $(MAKE) --no-print-directory test-images; \
	  export SAMSA_REQUIRE_SPEEDUPS=$(REQUIRE_SPEEDUPS); status=0; \
	  $(PY) -m pytest -q -n $(TEST_WORKERS) -m "not serial" --durations=20 || status=$$?; \
	  $(PY) -m pytest -q -m serial --durations=40 || status=$$?; \
	  exit $$status

test-images:
	@if [ "$${SAMSA_CONTAINERS:-1}" = 0 ]; then \
	  echo "SAMSA_CONTAINERS=0: no images built; the container tests are opted out"; \
	else \
	  $(PY) -m infra.docker.images --no-record || \
	    echo "make test: the images did not build (above): the container tests will fail"; \
	fi

# container images of the services, built offline (infra/docker/, docs/containers.md);
# uses DOCKER_HOST or the default socket, else starts the project's own dockerd
images: setup
	$(PY) -m infra.docker.images

images-down:
	$(PY) -m infra.docker.engine down

# the images the cloud instances run, to the environment's registry (ECR):
# infra/docker/push.py; the engine must be logged in to it
push-images: setup
	@test -n "$(REGISTRY)" || { echo "make push-images: REGISTRY=host[/path] is needed" >&2; exit 2; }
	$(PY) -m infra.docker.push --registry $(REGISTRY) $(if $(TAG),--tag $(TAG))

test-fast: setup
	@trap '$(PY) -m infra.docker.engine down-if-idle' EXIT; \
	  $(MAKE) --no-print-directory test-images; \
	  export SAMSA_REQUIRE_SPEEDUPS=$(REQUIRE_SPEEDUPS); status=0; \
	  $(PY) -m pytest -q -n $(TEST_WORKERS) -m "not serial" || status=$$?; \
	  $(PY) -m pytest -q -m "serial and not slow" || status=$$?; \
	  exit $$status

# A copy of the sources with the accelerator built under AddressSanitizer and
# UBSan (-Werror too); the codec's tests and fuzzers run against it. CPython
# itself leaks by design at exit, so leak detection is off.
ASAN_DIR := build/asan
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1 -Werror
test-asan: setup
	rm -rf $(ASAN_DIR) && mkdir -p $(ASAN_DIR)
	cp -r broker audit schemas tests docs setup.py pyproject.toml README.md $(ASAN_DIR)/
	find $(ASAN_DIR) -name '*.so' -delete
	cd $(ASAN_DIR) && CFLAGS="$(ASAN_FLAGS)" LDFLAGS="-fsanitize=address,undefined" \
	    ../../$(PY) setup.py --quiet build_ext --inplace
	cd $(ASAN_DIR) && PYTHONPATH=. SAMSA_REQUIRE_SPEEDUPS=1 \
	    ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	    ../../$(PY) -m pytest -q -p no:cacheprovider tests/protocol tests/audit/test_tally.py

bench: setup
	$(PY) -m bench.run

bench-scale: setup
	$(PY) -m bench.scale

bench-mirror: setup
	$(PY) -m bench.mirror_bench

# the peers extra (pika, stomp.py, matplotlib) stays out of the test install
PEERS_STAMP := $(VENV)/.peers-installed
$(PEERS_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[test,bench,airflow,peers]'
	@touch $(PEERS_STAMP)

bench-peers: setup $(PEERS_STAMP)
	@scripts/ensure-peer-packages.sh
	$(PY) -m bench.peers

# The multi-datacenter lab (docs/multi-dc.md); its processes outlive make.
LAB_DIR  ?= .lab
LAB_ARGS ?=

lab-up: setup
	$(PY) -m infra.local up --dir $(LAB_DIR) $(LAB_ARGS)

lab-status: setup
	$(PY) -m infra.local status --dir $(LAB_DIR)

lab-down: setup
	$(PY) -m infra.local down --dir $(LAB_DIR) $(if $(PURGE),--purge)

# A real Airflow with the project's DAGs (docs/loader.md); outlives make.
AIRFLOW_DIR  ?= .airflow
AIRFLOW_PORT ?= 8080
WAREHOUSE_CONFIG ?= config/loader.toml

airflow-up: setup
	$(PY) -m infra.local.airflow_stack up --dir $(AIRFLOW_DIR) --port $(AIRFLOW_PORT) \
	    --warehouse-config $(WAREHOUSE_CONFIG)

airflow-status: setup
	$(PY) -m infra.local.airflow_stack status --dir $(AIRFLOW_DIR)

airflow-down: setup
	$(PY) -m infra.local.airflow_stack down --dir $(AIRFLOW_DIR)

# The local Terraform environment (infra/terraform/environments/local): the
# same shape as the cloud environments, each component a resource that starts
# real processes; TF_VARS passes -var options.
TF_LOCAL := infra/terraform/environments/local
TF_VARS  ?=
TF       := TF_CLI_CONFIG_FILE=/dev/null terraform -chdir=$(TF_LOCAL)

tf-local-up: setup
	$(TF) init -input=false
	$(TF) apply -auto-approve -input=false $(TF_VARS)

tf-local-down: setup
	$(TF) destroy -auto-approve -input=false $(TF_VARS)

clean:
	rm -rf $(VENV) .venv-checkov build *.egg-info .pytest_cache .hypothesis broker/protocol/*.so

bench-audit: setup
	$(PY) -m bench.audit_bench --runs 5

bench-loader: setup
	$(PY) -m bench.loader_bench --runs 3

# produce -> audit complete -> Parquet, on the demo's pipeline (~12 min)
bench-freshness: setup
	$(PY) -m bench.freshness_bench

# the containerized pipeline ready from nothing running, and containers vs
# processes in one run (bench/containers_bench.py; after make images)
bench-containers: setup
	$(PY) -m bench.containers_bench

# replication (bench/replication_bench.py): factor 3 against 1, failovers, 1 GB re-replicated
bench-replication: setup
	$(PY) -m bench.replication_bench

# the network lab's router: one TCP stream per MTU and link round trip (root)
bench-network: setup
	$(PY) -m bench.network_bench

# the mirror against the round trip of the link it copies across (root)
bench-mirror-wan: setup
	$(PY) -m bench.mirror_wan_bench

# produce and consume through the broker's TLS listener against its plaintext one
bench-tls: setup
	$(PY) -m bench.tls_bench --messages 2000000 --json bench/results/tls-$$(date +%F).json

# connection set-up: plaintext, SCRAM, TLS, TLS + SCRAM (median ms per connection)
bench-scram: setup
	$(PY) -m bench.scram_bench --json bench/results/scram-$$(date +%F).json

# the demo's start-up (lab, audit, Airflow) secured against open
bench-startup: setup
	$(PY) -m bench.startup_bench --json bench/results/startup-$$(date +%F).json
