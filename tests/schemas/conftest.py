"""Registries for the schema tests: a file store in the test's directory,
ZooKeeper stores under chroots of the session's real ZooKeeper server, and
a REST store: ``python -m schemas serve`` (a real process) over ZooKeeper."""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass

import pytest

from broker.service_kit.process import SupervisedProcess
from schemas.registry import SchemaRegistry
from schemas.stores import FileStore, RestStore, ZooKeeperStore

SERVING = re.compile(rb"schema registry on (https?://\S+)/")


@dataclass
class ServedRegistry:
    url: str                    # the REST API's
    store_url: str              # the ZooKeeper store it serves
    registry: SchemaRegistry    # Samsa's registry on that store, directly
    process: SupervisedProcess


@pytest.fixture
def file_registry(tmp_path):
    registry = SchemaRegistry(FileStore(str(tmp_path / "registry.json")))
    yield registry
    registry.close()


@pytest.fixture
def zk_registries(zookeeper, zk_chroot):
    """``make(name)``: a registry in ZooKeeper under ``<chroot>/<name>`` (one per cluster)."""
    made: list[SchemaRegistry] = []

    def make(name: str) -> SchemaRegistry:
        registry = SchemaRegistry(ZooKeeperStore(zookeeper.connect_string(f"{zk_chroot}/{name}")))
        made.append(registry)
        return registry

    yield make
    for registry in made:
        registry.close()


@pytest.fixture
def served_registry(zookeeper, zk_chroot, tmp_path):
    """``python -m schemas serve`` (port 0) over a ZooKeeper registry."""
    store_url = f"zookeeper://{zookeeper.connect_string(zk_chroot + '/served')}"
    process = SupervisedProcess(
        "schema-registry",
        [sys.executable, "-m", "schemas", "--registry", store_url, "serve", "--port", "0"],
        str(tmp_path / "schema-registry.log"))
    urls: list[str] = []

    def serving(line: bytes) -> bool:
        found = SERVING.search(line)
        if found:
            urls.append(found.group(1).decode())
        return found is not None

    process.start(ready_line=serving)
    process.wait_ready(30)
    registry = SchemaRegistry(ZooKeeperStore(store_url.removeprefix("zookeeper://")))
    try:
        yield ServedRegistry(urls[0], store_url, registry, process)
    finally:
        registry.close()
        status = process.stop(10)
        assert status == 0, process.tail_log()


@pytest.fixture(params=["file", "zookeeper", "rest"])
def registry(request, tmp_path):
    if request.param == "file":
        return request.getfixturevalue("file_registry")
    if request.param == "rest":
        return SchemaRegistry(RestStore(request.getfixturevalue("served_registry").url))
    return request.getfixturevalue("zk_registries")("cluster")
