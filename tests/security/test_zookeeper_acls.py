"""ZooKeeper protected (issue 30, points 4 and 7) with real brokers, real
group consumers and a real ZooKeeper: with their identities (digest
credentials), the brokers' records, the users' credentials and a group's
offsets are created so that a stranger's kazoo client can read nothing
sensitive and change nothing; the pipeline works as before; another group
may still start under /consumers. And the migration: a cluster that ran
open is secured in place by the zookeeper-acls tool."""
from __future__ import annotations

import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from broker.client.group_consumer import GroupConsumer, GroupConsumerConfig
from broker.client.producer import Producer
from broker.coordination import paths
from broker.coordination.zk_acls import Identity, describe, is_open
from broker.coordination.zk import make_client, start_client
from broker.protocol.scram import ScramCredential
from broker.security import store
from broker_helpers import run_module, wait_until


def identity_file(tmp_path, name: str, password: str) -> str:
    path = tmp_path / f"{name}.zk"
    path.write_text(f"{name}:{password}\n")
    return str(path)


def stranger(connect: str, auth: tuple[str, str] | None = None) -> KazooClient:
    """A kazoo client of someone else (no credentials, or wrong ones)."""
    client = KazooClient(hosts=connect, timeout=10,
                         auth_data=[("digest", f"{auth[0]}:{auth[1]}")] if auth else None)
    client.start(timeout=15)
    return client


def consume(connect, group, topic, count, auth_file):
    got = []
    with GroupConsumer(GroupConsumerConfig(connect, group, topics=(topic,),
                                           zookeeper_auth_file=auth_file)) as consumer:
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            got += consumer.poll(500)
            consumer.commit()
    return got


def assert_refused(call) -> None:
    with pytest.raises(NoAuthError):
        call()


def test_a_stranger_can_read_nothing_sensitive_and_change_nothing(
        broker_factory, zookeeper, zk_chroot, tmp_path, topic):
    connect = zookeeper.connect_string() + zk_chroot
    cluster_file = identity_file(tmp_path, "samsa-cluster", "cluster-secret")
    group_file = identity_file(tmp_path, "loader", "loader-secret")
    broker = broker_factory({"zookeeper": connect, "zookeeper_auth_file": cluster_file})
    admin_zk = make_client(connect, identity=Identity.from_file(cluster_file))
    start_client(admin_zk, connect)
    try:
        store.set_user(admin_zk, "alice", ScramCredential.from_password("pw"))
        wait_until(lambda: admin_zk.exists(paths.broker_id_path(0)), 20,
                   what="the broker to register")
        with Producer(bootstrap=broker.address, acks="flushed") as producer:
            for i in range(20):
                producer.send(topic, b"m-%d" % i, partition=0)
            producer.flush(timeout=30)
        assert len(consume(connect, "loader", topic, 20, group_file)) == 20
        offsets = paths.CONSUMERS + "/loader/offsets/" + topic
        wait_until(lambda: admin_zk.exists(offsets) and admin_zk.get_children(offsets), 10,
                   what="the group's committed offsets")
        [offset_node] = [f"{offsets}/{c}" for c in admin_zk.get_children(offsets)][:1]

        for who in (None, ("samsa-cluster", "a wrong password"), ("mallory", "x")):
            zk = stranger(connect, who)
            try:
                # the broker registry: readable (clients find brokers), not writable
                assert zk.get(paths.broker_id_path(0))[0]
                assert_refused(lambda: zk.create(paths.broker_id_path(99), b"evil:1"))
                assert_refused(lambda: zk.set(paths.broker_id_path(0), b"evil:1"))
                assert_refused(lambda: zk.delete(paths.broker_id_path(0)))
                # the credentials: not even their names
                assert_refused(lambda: zk.get(paths.user_path("alice")))
                assert_refused(lambda: zk.get_children(paths.SECURITY_USERS))
                assert_refused(lambda: zk.create(paths.user_path("mallory"), b"{}"))
                # the group's offsets: readable, not changed, not deleted
                assert zk.get(offset_node)[0]
                assert_refused(lambda: zk.set(offset_node, b"0"))
                assert_refused(lambda: zk.delete(offset_node))
                assert_refused(lambda: zk.create(offsets + "/0-7", b"0"))
                # /consumers: anyone may start a group of their own
                zk.ensure_path(paths.CONSUMERS + f"/stranger-{id(zk)}/ids")
            finally:
                zk.stop()
                zk.close()
        # nothing the strangers tried changed anything
        assert admin_zk.get(paths.broker_id_path(0))[0].decode().endswith(
            broker.address.rsplit(":", 1)[1])
        assert store.list_users(admin_zk) == ["alice"]
        acl, _ = admin_zk.get_acls(paths.user_path("alice"))
        assert describe(acl) == "digest:samsa-cluster=all"
        # another group, another identity: it starts and commits under /consumers
        other = identity_file(tmp_path, "audit", "audit-secret")
        assert len(consume(connect, "audit", topic, 20, other)) == 20
    finally:
        admin_zk.stop()
        admin_zk.close()


def test_an_open_cluster_is_secured_in_place(broker_factory, zookeeper, zk_chroot, tmp_path,
                                             topic):
    connect = zookeeper.connect_string() + zk_chroot
    broker = broker_factory({"zookeeper": connect})              # open, as before
    with Producer(bootstrap=broker.address, acks="flushed") as producer:
        producer.send(topic, b"before", partition=0)
        producer.flush(timeout=30)
    assert len(consume(connect, "loader", topic, 1, "")) == 1
    zk = stranger(connect)
    try:
        store.set_user(zk, "alice", ScramCredential.from_password("pw"))
        assert is_open(zk.get_acls(paths.broker_id_path(0))[0])
    finally:
        zk.stop()
        zk.close()

    cluster_file = identity_file(tmp_path, "samsa-cluster", "cluster-secret")
    group_file = identity_file(tmp_path, "loader", "loader-secret")
    # the order docs/security.md gives: the brokers restarted with the
    # cluster's identity first (they go on writing the open records) ...
    broker.stop()
    broker = broker_factory({"zookeeper": connect, "zookeeper_auth_file": cluster_file},
                            data_dir=broker.data_dir)
    wait_until(lambda: broker_registered(connect), 20, what="the broker to register again")
    # ... then the tool: a dry run first, which changes nothing
    dry = run_module("broker.tools", "zookeeper-acls", "--zookeeper", connect,
                     "--zookeeper-auth-file", cluster_file, "--group", f"loader={group_file}",
                     "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert b"would set" in dry.stdout
    zk = stranger(connect)
    try:
        assert is_open(zk.get_acls(paths.user_path("alice"))[0])   # a dry run changes nothing
        zk.ensure_path("/schemas/someone-elses")      # another writer's subtree, open
    finally:
        zk.stop()
        zk.close()
    done = run_module("broker.tools", "zookeeper-acls", "--zookeeper", connect,
                      "--zookeeper-auth-file", cluster_file, "--group", f"loader={group_file}")
    assert done.returncode == 0, done.stderr
    assert b"not the cluster's and no identity given, left as they were: /schemas" \
        in done.stdout
    zk = stranger(connect)
    try:
        assert_refused(lambda: zk.get(paths.user_path("alice")))
        assert_refused(lambda: zk.create(paths.broker_id_path(99), b"evil:1"))
        assert_refused(lambda: zk.set(paths.broker_topic_path(topic), b"evil"))
        offsets = paths.CONSUMERS + "/loader/offsets/" + topic
        [node] = [f"{offsets}/{c}" for c in zk.get_children(offsets)]
        assert_refused(lambda: zk.set(node, b"0"))
        assert is_open(zk.get_acls("/schemas/someone-elses")[0])
    finally:
        zk.stop()
        zk.close()
    # run again, it changes nothing: it sees that the group's nodes match
    # (their ACLs' digests are shown to their admins alone: it failed with
    # NoAuthError, trying to set what it could not read)
    again = run_module("broker.tools", "zookeeper-acls", "--zookeeper", connect,
                       "--zookeeper-auth-file", cluster_file, "--group", f"loader={group_file}")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(b"0 nodes secured"), again.stdout
    # the broker and the group, with its own identity, work on
    with Producer(bootstrap=broker.address, acks="flushed") as producer:
        producer.send(topic, b"after", partition=0)
        producer.flush(timeout=30)
    got = consume(connect, "loader", topic, 1, group_file)
    assert [m.value for m in got] == [b"after"]


def broker_registered(connect: str) -> bool:
    zk = stranger(connect)
    try:
        return bool(zk.exists(paths.broker_id_path(0)))
    finally:
        zk.stop()
        zk.close()
