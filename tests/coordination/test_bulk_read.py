"""broker/coordination/bulk_read.py against a real ZooKeeper (3.8): reads of
many nodes with multiRead, in a chroot, spanning several requests, with
missing and empty nodes among them; and the fallback a server without
multiRead gets (forced here: Debian ships no such server)."""
from __future__ import annotations

import pytest
from kazoo.exceptions import UnimplementedError

from broker.coordination import bulk_read
from broker.coordination.bulk_read import MULTI_READ_OPS, children_many, get_many


@pytest.fixture
def nodes(zk_client):
    """2,500 data nodes under /many (more than two multiRead requests' worth),
    one of them empty, and a small tree for children reads."""
    tx = None
    zk_client.ensure_path("/many")
    for start in range(0, 2500, 500):
        tx = zk_client.transaction()
        for i in range(start, start + 500):
            tx.create(f"/many/n{i:05d}", b"" if i == 7 else b"value-%d" % i)
        assert all(r is not None and not isinstance(r, Exception) for r in tx.commit())
    zk_client.ensure_path("/tree/a/x")
    zk_client.ensure_path("/tree/a/y")
    zk_client.ensure_path("/tree/b")
    return zk_client


def test_get_many_reads_every_node_in_order_with_missing_ones_as_none(nodes):
    paths = [f"/many/n{i:05d}" for i in range(2500)]
    paths.insert(1234, "/many/missing")
    assert len(paths) > 2 * MULTI_READ_OPS
    got = get_many(nodes, paths)
    assert len(got) == len(paths)
    assert got[1234] is None
    rest = got[:1234] + got[1235:]
    assert [data for data, _stat in rest] == \
        [b"" if i == 7 else b"value-%d" % i for i in range(2500)]
    # the stats are the nodes' own (mtime is what the lag monitor reads)
    data, stat = nodes.get("/many/n00042")
    assert rest[42][1].mtime == stat.mtime and rest[42][1].version == stat.version


def test_children_many_lists_children_and_gives_nothing_for_a_missing_node(nodes):
    got = children_many(nodes, ["/tree", "/tree/a", "/tree/b", "/tree/nope"])
    assert [sorted(c) for c in got] == [["a", "b"], ["x", "y"], [], []]


def test_empty_lists_need_no_request(nodes):
    assert get_many(nodes, []) == [] and children_many(nodes, []) == []


def test_without_multiread_the_reads_fall_back(nodes, monkeypatch):
    """A server older than 3.6 answers multiRead with UnimplementedError."""
    asked = []

    def unimplemented(*args, **kwargs):
        asked.append(args[1])
        raise UnimplementedError()
    monkeypatch.setattr(bulk_read, "_multi_read", unimplemented)
    paths = [f"/many/n{i:05d}" for i in range(0, 2500, 10)] + ["/many/missing"]
    got = get_many(nodes, paths)
    assert [g[0] for g in got[:-1]] == [b"" if i == 7 else b"value-%d" % i
                                        for i in range(0, 2500, 10)]
    assert got[-1] is None
    assert [sorted(c) for c in children_many(nodes, ["/tree/a", "/nope"])] == [["x", "y"], []]
    assert len(asked) == 1          # refused once: the client does not ask again
