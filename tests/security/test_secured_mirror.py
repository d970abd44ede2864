"""The mirror between secured clusters (issue 30, point 6's first step): the
source and the target ask for SCRAM, enforce ACLs and keep their ZooKeeper
records under the cluster's identity; the mirror, with its own user (read
on the source, write on the target) and its group's ZooKeeper identity,
copies everything an application produced; a stranger can change neither
its group's offsets nor read the topic."""
from __future__ import annotations

import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from broker.client.authentication import SaslLogin
from broker.security.credentials import ServiceCredentials
from broker.client.cluster_producer import ClusterProducer
from broker.client.connection import BrokerConnection, parse_address
from broker.coordination import paths
from broker.coordination.named_cluster import NamedCluster
from broker.coordination.zk import make_client, start_client
from broker.coordination.zk_acls import Identity
from broker.protocol import api
from broker.protocol.errors import ErrorCode, SamsaError
from broker.protocol.message import decode_message_set
from broker.protocol.scram import ScramCredential
from broker.security import store
from broker.security.acl import AclEntry
from broker_helpers import wait_until
from mirror.config import MirrorConfig
from mirror.mirror import Mirror

USERS = {"admin": "admin-pw", "mirror": "mirror-pw", "app": "app-pw"}


def allow(user, operation, name="*"):
    return AclEntry(f"User:{user}", "allow", operation, "topic", name)


def secure_cluster(zookeeper, chroot, cluster_file, acls) -> str:
    """Users and ACLs of one cluster, written as its identity; its connect string."""
    connect = zookeeper.connect_string(chroot)
    zk = make_client(connect, identity=Identity.from_file(cluster_file))
    start_client(zk, connect)
    try:
        for user, password in USERS.items():
            store.set_user(zk, user, ScramCredential.from_password(password))
        store.add_acls(zk, acls)
    finally:
        zk.stop()
        zk.close()
    return connect


def read_topic(broker, topic) -> list[bytes]:
    host, port = parse_address(broker.address)
    values = []
    with BrokerConnection(host, port, "tests", request_timeout=10,
                          sasl=SaslLogin("admin", USERS["admin"])) as conn:
        info = conn.request(api.MetadataRequest((topic,))).topics[0]
        if info.error:
            return []
        for p in info.partitions:
            offset = p.earliest
            while offset < p.latest:
                r = conn.request(api.FetchRequest(0, 1, (
                    api.FetchEntry(topic, p.partition, offset, 1 << 20),))).results[0]
                messages, used = decode_message_set(r.message_set, offset, True, topic,
                                                    p.partition)
                values += [m.value for m in messages]
                offset += used
    return values


def test_the_mirror_copies_between_secured_clusters(broker_factory, zookeeper, zk_chroot,
                                                    tmp_path):
    files = {}
    for name, line in (("cluster", "samsa-cluster:cluster-zk-pw"),
                       ("mirror-zk", "mirror:mirror-zk-pw"), ("mirror-pw", USERS["mirror"])):
        files[name] = tmp_path / name
        files[name].write_text(line + "\n")
    src = secure_cluster(zookeeper, f"{zk_chroot}-src", files["cluster"],
                         [allow("mirror", "read"), allow("app", "write", "events"),
                          allow("app", "create", "events")])
    dst = secure_cluster(zookeeper, f"{zk_chroot}-dst", files["cluster"],
                         [allow("mirror", "all")])
    secured = {"authentication": "scram", "authorization": True, "super_users": "User:admin",
               "zookeeper_auth_file": str(files["cluster"]), "log.flush_ms": 10}
    src_broker = broker_factory({"zookeeper": src, **secured})
    dst_broker = broker_factory({"zookeeper": dst, **secured})
    wait_until(lambda: _registered(src) and _registered(dst), 20,
               what="both brokers to register")

    with ClusterProducer(src, acks="flushed", sasl_username="app",
                         sasl_password=USERS["app"]) as producer:
        for i in range(200):
            producer.send("events", b"event-%d" % i)
        producer.flush(timeout=30)

    config = MirrorConfig(
        sources=(NamedCluster("src", src),), target=NamedCluster("dst", dst),
        group="mirror-secured", metrics_port=-1, commit_interval_ms=200,
        credentials=ServiceCredentials(sasl_username="mirror",
                                       sasl_password_file=str(files["mirror-pw"]),
                                       zookeeper_auth_file=str(files["mirror-zk"])))
    mirror = Mirror(config).start()
    try:
        wait_until(lambda: mirror.copied >= 200, 60, what="the mirror to copy everything")
        deadline = time.monotonic() + 30
        while sorted(read_topic(dst_broker, "events")) != \
                sorted(b"event-%d" % i for i in range(200)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sorted(read_topic(dst_broker, "events")) == \
            sorted(b"event-%d" % i for i in range(200))
    finally:
        mirror.close()

    # the mirror's group records in the source: readable, not changeable by a stranger
    stranger = KazooClient(hosts=src, timeout=10)
    stranger.start(timeout=15)
    try:
        offsets = f"{paths.CONSUMERS}/mirror-secured/offsets/events"
        nodes = [f"{offsets}/{c}" for c in stranger.get_children(offsets)]
        assert nodes
        with pytest.raises(NoAuthError):
            stranger.set(nodes[0], b"0")
        with pytest.raises(NoAuthError):
            stranger.delete(nodes[0])
    finally:
        stranger.stop()
        stranger.close()
    # and the app, which may write events, cannot read them back
    host, port = parse_address(src_broker.address)
    with BrokerConnection(host, port, "tests", request_timeout=10,
                          sasl=SaslLogin("app", USERS["app"])) as conn:
        with pytest.raises(SamsaError) as info:
            conn.request(api.FetchRequest(0, 1, (api.FetchEntry("events", 0, 0, 1 << 20),)))
        assert info.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _registered(connect: str) -> bool:
    zk = KazooClient(hosts=connect, timeout=10)
    zk.start(timeout=15)
    try:
        return bool(zk.exists(paths.broker_id_path(0)))
    finally:
        zk.stop()
        zk.close()
