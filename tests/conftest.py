"""Shared fixtures: real broker processes (``python -m broker``) started by
broker.harness, stopped at teardown, their logs printed when a test using
them fails (as kazoo's harness dumps ZooKeeper's logs).

* ``broker`` / ``broker_factory``: brokers of one test, in its tmp_path
  (``broker_factory`` takes settings such as {"log.flush_ms": 100000}).
* ``module_broker`` + ``topic``: one default broker shared by a module's
  tests, each test in topics of its own (kazoo's one server, fresh chroot per
  test): for tests that need no settings of their own and never stop it.
* ``tmpfs``: small real file systems, to fill up.
* ``zookeeper``: one real ZooKeeper server for the whole session (started by
  broker.harness.zookeeper, as kazoo's harness keeps one cluster), with
  ``zk_chroot`` (a fresh chroot per test) and ``zk_client`` (a started
  KazooClient inside it); ``zk_ensemble``: a 3-server quorum per module, for
  fault tests (a test that kills a member restarts it). When a test using
  either fails, what the servers logged during the test is printed.

Helpers that are plain functions (raw requests, metrics, waiting with a
deadline) live in tests/broker_helpers.py.
"""
from __future__ import annotations

import itertools
import os
import pathlib
import re
import subprocess

import pytest

from broker.client.admin import AdminClient
from broker.harness import BrokerProcess, ZooKeeperEnsemble
from cluster_helpers import Cluster, chroot_client


def pytest_sessionstart(session):
    # `make test` sets SAMSA_REQUIRE_SPEEDUPS=1 where a C compiler and zlib's
    # headers exist: then a missing accelerator is a failure, not a skip (the
    # README's speed figures need it)
    from broker.protocol.message import ACCELERATED
    if os.environ.get("SAMSA_REQUIRE_SPEEDUPS") == "1" and not ACCELERATED:
        pytest.exit("the C accelerator of the codec was expected (SAMSA_REQUIRE_SPEEDUPS=1) "
                    "but broker.protocol._speedups does not import: run `make setup` and "
                    "read its codec line", returncode=3)


# Once pytest has printed its summary, the process must end: a thread or an
# atexit hook that a failing test left waiting (a client of a ZooKeeper that
# is gone) must not hold `make test` until CI's time runs out, which would
# hide the summary's verdict. After this grace the process exits with
# pytest's status, whatever still waits.
EXIT_GRACE_S = int(os.environ.get("SAMSA_TEST_EXIT_GRACE_S", "120"))


def pytest_sessionfinish(session, exitstatus):
    session.config._samsa_exit_status = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    import sys
    import threading

    status = getattr(config, "_samsa_exit_status", None)
    if status is None:
        return

    def give_up() -> None:
        print(f"\n(tests/conftest.py: the process had not exited {EXIT_GRACE_S} s after the "
              f"summary: something still waits; its threads' stacks follow; exiting with "
              f"pytest's status {status})", file=sys.stderr, flush=True)
        import faulthandler
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        os._exit(status)
    watchdog = threading.Timer(EXIT_GRACE_S, give_up)
    watchdog.daemon = True
    watchdog.start()


# `make test` runs the suite in two passes: first every test not marked
# ``serial``, two at a time (pytest-xdist workers, each with its own
# ZooKeeper; most of these tests wait on brokers, so two workers on two cores
# take about half the time); then the ``serial`` ones, one at a time, as
# they always ran: the slow ones (whole pipelines, timed faults) and those
# that use what the machine has once (its Docker engine, network
# namespaces and addresses, Airflow stacks, the lab's port ranges).
SERIAL_DIRECTORIES = ("containers", "dags", "infra", "network")
# ... except these files of theirs, which use nothing the machine has once
# (files they read, commands on files in tmp_path, services on ports of their
# own): they run in the first pass
UNSHARED_FILES = (
    "dags/test_dag_files.py", "dags/test_dag_steps.py", "infra/test_checkov.py",
    "infra/test_boot_common.py", "infra/test_cloud_secrets.py", "infra/test_docker_files.py",
    "infra/test_haproxy_config.py", "infra/test_host_secrets.py",
    "infra/test_prometheus_config.py", "infra/test_terraform_cloud.py",
    "infra/test_terraform_plans.py", "infra/test_topology.py",
    "network/test_control_codec.py", "network/test_network_plan.py",
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    tests = pathlib.Path(__file__).parent
    serial = {tests / name for name in SERIAL_DIRECTORIES}
    unshared = {tests / name for name in UNSHARED_FILES}
    for item in items:
        if item.get_closest_marker("slow") or \
                (serial & set(item.path.parents) and item.path not in unshared):
            item.add_marker(pytest.mark.serial)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    # Keep each phase's report on the item, so fixtures can tell at teardown
    # whether the test failed.
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def _failed(node) -> bool:
    return any(getattr(getattr(node, f"rep_{when}", None), "failed", False)
               for when in ("setup", "call"))


class _Brokers:
    """Brokers started in one directory: each gets <dir>/broker-N for data
    and <dir>/broker-N.log for its log, a free port and a free metrics port."""

    def __init__(self, directory) -> None:
        self.directory = directory
        self.started: list[BrokerProcess] = []

    def start(self, settings: dict[str, object] | None = None, **kwargs) -> BrokerProcess:
        name = f"broker-{len(self.started)}"
        kwargs.setdefault("data_dir", str(self.directory / name))
        kwargs.setdefault("log_path", str(self.directory / f"{name}.log"))
        kwargs.setdefault("metrics_port", 0)
        broker = BrokerProcess(settings=settings, **kwargs)
        self.started.append(broker)
        return broker.start()

    def stop_all(self, print_logs: bool) -> None:
        for broker in self.started:
            broker.stop()
            if broker.process is not None and broker.process.stop_notes:
                print(f"the broker in {broker.data_dir} did not stop on SIGTERM: "
                      + "; ".join(broker.process.stop_notes))
            if print_logs:
                print_log(broker)


def print_log(broker: BrokerProcess, start: int = 0) -> None:
    print(f"\n----- log of the broker in {broker.data_dir} ({broker.log_path}) -----")
    try:
        with open(broker.log_path, "rb") as f:
            f.seek(start)
            lines = f.read().decode(errors="replace").splitlines()
    except OSError as exc:
        lines = [f"(no log: {exc})"]
    print("\n".join(lines[-200:]))


@pytest.fixture
def broker_factory(tmp_path, request):
    """Start brokers: ``broker_factory({"log.flush_ms": 100000})`` returns a
    started BrokerProcess (data in tmp_path/broker-N, log in
    tmp_path/broker-N.log). Keyword arguments go to BrokerProcess (e.g.
    ``data_dir=`` for a directory elsewhere; the log stays in tmp_path).
    Every broker is stopped (SIGTERM) at teardown."""
    brokers = _Brokers(tmp_path)
    yield brokers.start
    brokers.stop_all(print_logs=_failed(request.node))


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    """A broker with default settings, for this test alone."""
    return broker_factory()


@pytest.fixture(scope="module")
def _module_brokers(tmp_path_factory):
    brokers = _Brokers(tmp_path_factory.mktemp("module-broker"))
    yield brokers
    brokers.stop_all(print_logs=False)     # failing tests print their part (below)


@pytest.fixture
def module_broker(_module_brokers, request) -> BrokerProcess:
    """The default broker shared by the tests of this module; if this test
    fails, the part of its log written during the test is printed."""
    if not _module_brokers.started:
        _module_brokers.start()
    broker = _module_brokers.started[0]
    if broker.proc.poll() is not None:
        pytest.fail(f"the module's broker has exited:\n{broker.tail_log()}")
    log_start = os.path.getsize(broker.log_path)
    yield broker
    if _failed(request.node):
        print_log(broker, log_start)


@pytest.fixture
def topic(request) -> str:
    """A topic name (not created) no other test uses: the test's own name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:180]


@pytest.fixture
def admin(broker):
    """An AdminClient of ``broker``."""
    with AdminClient(broker.address, client_id="samsa-tests-admin") as client:
        yield client


@pytest.fixture
def tmpfs(tmp_path):
    """Mount small file systems: ``tmpfs("4m")`` mounts a tmpfs of that size
    under tmp_path and returns its path; unmounted at teardown. Skips the test
    where mounting is not permitted (it needs root or CAP_SYS_ADMIN): a full
    disk is not something to fake."""
    mounted: list[pathlib.Path] = []

    def mount(size: str) -> pathlib.Path:
        point = tmp_path / f"tmpfs-{len(mounted)}"
        point.mkdir()
        try:
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                                   str(point)], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(f"cannot run mount: {exc}")
        if done.returncode != 0:
            pytest.skip(f"cannot mount a {size} tmpfs (needs root or CAP_SYS_ADMIN): "
                        f"{done.stderr.strip() or done.returncode}")
        mounted.append(point)
        return point

    yield mount
    for point in reversed(mounted):
        # lazy: a process still holding a file there must not fail the test
        subprocess.run(["umount", "-l", str(point)], capture_output=True, timeout=30)


# ---------------------------------------------------------------- ZooKeeper

_ZOOKEEPER_FIXTURES = ("zookeeper", "zk_ensemble")
_chroot_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory) -> ZooKeeperEnsemble:
    """One standalone ZooKeeper server for the whole test session; tests keep
    apart by chroot (``zk_chroot``), not by server. Do not stop it."""
    ensemble = ZooKeeperEnsemble(1, str(tmp_path_factory.mktemp("zookeeper")))
    ensemble.start()
    yield ensemble
    ensemble.stop()


@pytest.fixture(scope="module")
def zk_ensemble(tmp_path_factory) -> ZooKeeperEnsemble:
    """A 3-server ZooKeeper quorum shared by a module's tests; a test that
    kills a member restarts it before it ends (``zk_ensemble.restart(i)``)."""
    ensemble = ZooKeeperEnsemble(3, str(tmp_path_factory.mktemp("zk-ensemble")))
    ensemble.start()
    yield ensemble
    ensemble.stop()


@pytest.fixture(autouse=True)
def _zookeeper_logs_on_failure(request):
    # Shared servers outlive the test, so print only what they logged during it.
    names = [name for name in _ZOOKEEPER_FIXTURES if name in request.fixturenames]
    if not names:
        yield
        return
    positions = {name: request.getfixturevalue(name).log_positions() for name in names}
    yield
    if _failed(request.node):
        for name in names:
            print(f"\n===== ZooKeeper logs ({name}) during {request.node.nodeid} =====")
            print(request.getfixturevalue(name).logs(since=positions[name]))


@pytest.fixture
def zk_chroot(request) -> str:
    """A ZooKeeper path no other test uses, e.g. "/test-test_foo-7" (not created)."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name).strip("-")[:100]
    return f"/test-{name}-{next(_chroot_numbers)}"


@pytest.fixture
def zk_client(zookeeper, zk_chroot):
    """A started KazooClient rooted at ``zk_chroot`` (created), on the session's
    server; stopped and closed at teardown."""
    from kazoo.client import KazooClient

    # create the chroot from outside it first: kazoo warns when it starts in
    # a chroot that does not exist
    root = KazooClient(hosts=zookeeper.connect_string(), timeout=10)
    root.start(timeout=15)
    root.ensure_path(zk_chroot)
    root.stop()
    root.close()
    client = KazooClient(hosts=zookeeper.connect_string(zk_chroot), timeout=10)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


# ------------------------------------------------------------------ clusters

# brokers flush often: the mirror waits for "flushed" acknowledgements
FAST_FLUSH = {"log.flush_ms": 10}


@pytest.fixture
def clusters(zookeeper, zk_chroot, broker_factory):
    """``make(name, brokers=1) -> Cluster`` of real brokers registered under
    ``<chroot>-<name>`` of the session's ZooKeeper (for the mirror and the audit)."""
    made: list[Cluster] = []

    def make(name: str, brokers: int = 1, settings: dict | None = None) -> Cluster:
        connect = zookeeper.connect_string(f"{zk_chroot}-{name}")
        cluster = Cluster(chroot_client(connect), connect, broker_factory)
        cluster.name = name
        for broker_id in range(brokers):
            cluster.add_broker(broker_id, {**FAST_FLUSH, **(settings or {})})
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.zk.stop()
        cluster.zk.close()
