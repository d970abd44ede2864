"""Registries for the schema tests: a file store in the test's directory, and
ZooKeeper stores under chroots of the session's real ZooKeeper server."""
from __future__ import annotations

import pytest

from schemas.registry import SchemaRegistry
from schemas.stores import FileStore, ZooKeeperStore


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


@pytest.fixture(params=["file", "zookeeper"])
def registry(request, tmp_path):
    if request.param == "file":
        return request.getfixturevalue("file_registry")
    return request.getfixturevalue("zk_registries")("cluster")
