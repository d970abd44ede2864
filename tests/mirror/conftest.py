"""Fixtures of the mirror tests: source and target clusters of real brokers
under chroots of the session's ZooKeeper, and mirrors (in-process or as
``python -m mirror`` processes) stopped at teardown."""
from __future__ import annotations

import sys

import pytest

from broker.client.cluster_producer import ClusterProducer
from broker.service_kit.process import SupervisedProcess
from broker.service_kit.settings import to_toml
from cluster_helpers import Cluster
from mirror.config import MirrorConfig
from mirror.mirror import Mirror


@pytest.fixture
def mirrors():
    """``start(config) -> Mirror`` in this process, closed at teardown."""
    running: list[Mirror] = []

    def start(config: MirrorConfig) -> Mirror:
        mirror = Mirror(config).start()
        running.append(mirror)
        return mirror

    yield start
    for mirror in running:
        mirror.close()


@pytest.fixture
def mirror_processes(tmp_path):
    """``start(config) -> SupervisedProcess`` of ``python -m mirror --config``;
    killed at teardown. ``start.logs`` lists (process, log path)."""
    procs: list[tuple[SupervisedProcess, str]] = []

    def start(config: MirrorConfig, name: str = "mirror") -> SupervisedProcess:
        path = tmp_path / f"{name}-{len(procs)}.toml"
        path.write_text(to_toml(config))
        log_path = str(tmp_path / f"{name}-{len(procs)}.log")
        proc = SupervisedProcess(name, [sys.executable, "-m", "mirror", "--config", str(path),
                                        "--log-format", "json"], log_path)
        procs.append((proc, log_path))
        return proc.start()

    start.logs = procs
    yield start
    for proc, _ in procs:
        proc.kill()


@pytest.fixture
def cluster_producers():
    made: list[ClusterProducer] = []

    def make(cluster: Cluster, **settings) -> ClusterProducer:
        settings.setdefault("acks", "flushed")
        producer = ClusterProducer(cluster.connect, **settings)
        made.append(producer)
        return producer

    yield make
    for producer in made:
        producer.close()
