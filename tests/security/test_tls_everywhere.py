"""TLS for the connections found through ZooKeeper (issue 30, point 1): each
broker registers its TLS listener (/brokers/tls/<id>); followers fetch from
their leaders over it (``inter_broker_tls``), and the cluster producer, the
group consumer and the mirror reach the brokers there. The clusters here
leave no other way: their plaintext ports ask for SCRAM and no user exists,
their TLS ports take only certificates of the test's authority, and ACLs
give each certificate's subject exactly what it needs."""
from __future__ import annotations

import hashlib
import os

import pytest

from broker.client.admin import AdminClient
from broker.security.credentials import ServiceCredentials
from broker.client.cluster_producer import ClusterProducer
from broker.client.group_consumer import GroupConsumer
from broker.coordination import paths
from broker.coordination.cluster import ClusterView
from broker.coordination.named_cluster import NamedCluster
from broker.coordination.replica_state import PartitionState
from broker.coordination.zk import make_client, start_client
from broker.security import store
from broker.security.acl import AclEntry
from broker.security.ca import CertificateAuthority
from broker.security.tls import TlsSettings, client_context
from broker_helpers import wait_until
from cluster_helpers import REPLICATED, chroot_client, partition_state
from mirror.config import MirrorConfig
from mirror.mirror import Mirror



@pytest.fixture
def pki(tmp_path):
    ca = CertificateAuthority.create(str(tmp_path / "ca"))
    certs = str(tmp_path / "certs")
    return {"ca": ca.cert_path,
            "broker": ca.issue("broker", ["127.0.0.1", "localhost"], certs),
            "admin": ca.issue("admin", [], certs),
            "mirror": ca.issue("mirror", [], certs)}


def tls_only(pki) -> dict:
    cert, key = pki["broker"]
    return {"tls_port": 0, "tls_cert_file": cert, "tls_key_file": key,
            "tls_ca_file": pki["ca"], "tls_client_auth": "required",
            "tls_authentication": "certificate", "authentication": "scram",
            "authorization": True, "super_users": "User:CN=admin"}


def client_tls(pki, who: str = "admin") -> dict:
    cert, key = pki[who]
    return {"tls": True, "tls_ca_file": pki["ca"], "tls_cert_file": cert, "tls_key_file": key}


def prepare(connect: str, acls) -> None:
    zk = chroot_client(connect)
    try:
        store.add_acls(zk, acls)
    finally:
        zk.stop()
        zk.close()


def test_replication_producer_and_group_consumer_over_tls_only(clusters, zookeeper, zk_chroot,
                                                               pki):
    prepare(zookeeper.connect_string(f"{zk_chroot}-tls"),
            [AclEntry("User:CN=broker", "allow", "cluster_action", "cluster", "cluster")])
    cluster = clusters("tls", brokers=2, settings={**REPLICATED, **tls_only(pki),
                                                  "inter_broker_tls": True})
    # each broker registered its TLS listener beside its plaintext one
    for broker_id, broker in cluster.brokers.items():
        data, _ = cluster.zk.get(paths.broker_tls_path(broker_id))
        assert data.decode() == broker.tls_address
    admin_context = client_context(TlsSettings(*pki["admin"], ca_file=pki["ca"]))
    with AdminClient(cluster.brokers[0].tls_address, tls=admin_context) as admin:
        admin.create_topic("payments", 1, {"replication.factor": "2"})

    with ClusterProducer(cluster.connect, acks="all", **client_tls(pki)) as producer:
        view = producer.cluster
        wait_until(lambda: view.brokers() and view.is_replicated("payments"), 30,
                   what="the producer to see the replicated topic")
        assert {b: f"{h}:{p}" for b, (h, p) in view.brokers().items()} == \
            {b: broker.tls_address for b, broker in cluster.brokers.items()}
        for i in range(50):
            producer.send("payments", b"payment-%d" % i)
        producer.flush(timeout=30)

    # the follower holds the same bytes: it could fetch over TLS only
    def replicas() -> set[str]:
        return {hashlib.sha256(replica(b)).hexdigest() for b in cluster.brokers.values()}
    wait_until(lambda: len(replicas()) == 1 and len(replica(cluster.brokers[0])) > 0, 30,
               what=lambda: f"both replicas to hold the same bytes: {state(cluster)}")
    assert set(state(cluster).isr) == {0, 1}

    with GroupConsumer(zookeeper=cluster.connect, group="tls-readers", topics=("payments",),
                       **client_tls(pki)) as consumer:
        got = []
        wait_until(lambda: got.extend(m.value for m in consumer.poll(500)) or len(got) >= 50,
                   30, what=lambda: f"the group to read all 50 ({len(got)})")
    assert sorted(got) == sorted(b"payment-%d" % i for i in range(50))


def test_the_mirror_copies_over_tls_only(broker_factory, zookeeper, zk_chroot, pki):
    mirror_acls = [AclEntry("User:CN=mirror", "allow", "all", "topic", "*"),
                   AclEntry("User:CN=mirror", "allow", "all", "group", "*")]
    src = zookeeper.connect_string(f"{zk_chroot}-src")
    dst = zookeeper.connect_string(f"{zk_chroot}-dst")
    for connect in (src, dst):
        prepare(connect, mirror_acls)
        broker_factory({"zookeeper": connect, "log.flush_ms": 10, **tls_only(pki)})
    for connect in (src, dst):
        wait_until(lambda c=connect: _registered(c, paths.BROKER_TLS), 20,
                   what="the brokers to register")

    with ClusterProducer(src, acks="flushed", **client_tls(pki)) as producer:
        for i in range(200):
            producer.send("events", b"event-%d" % i)
        producer.flush(timeout=30)

    cert, key = pki["mirror"]
    mirror = Mirror(MirrorConfig(
        sources=(NamedCluster("src", src),), target=NamedCluster("dst", dst),
        group="mirror-tls", metrics_port=-1, commit_interval_ms=200,
        credentials=ServiceCredentials(tls=True, tls_ca_file=pki["ca"], tls_cert_file=cert,
                                       tls_key_file=key))).start()
    try:
        wait_until(lambda: mirror.copied >= 200, 60, what="the mirror to copy everything")
    finally:
        mirror.close()
    with GroupConsumer(zookeeper=dst, group="check", topics=("events",), **client_tls(pki)) as consumer:
        got = []
        wait_until(lambda: got.extend(m.value for m in consumer.poll(500)) or len(got) >= 200,
                   30, what=lambda: f"the target to hold all 200 ({len(got)})")
    assert sorted(got) == sorted(b"event-%d" % i for i in range(200))


def test_a_tls_client_leaves_out_a_broker_without_a_tls_listener(broker_factory, zookeeper,
                                                                  zk_chroot):
    connect = zookeeper.connect_string(zk_chroot)
    broker_factory({"zookeeper": connect})
    wait_until(lambda: _registered(connect), 20, what="the broker to register")
    zk = make_client(connect)
    start_client(zk, connect)
    try:
        assert ClusterView(zk).brokers() and ClusterView(zk, tls=True).brokers() == {}
    finally:
        zk.stop()
        zk.close()


def test_inter_broker_tls_needs_a_tls_listener():
    from broker.config import BrokerConfig, ConfigError
    with pytest.raises(ConfigError, match="inter_broker_tls needs tls_port"):
        BrokerConfig(zookeeper="127.0.0.1:2181/x", inter_broker_tls=True)


def state(cluster) -> PartitionState | None:
    return partition_state(cluster, "payments", 0)


def replica(broker) -> bytes:
    directory = os.path.join(broker.data_dir, "topics", "payments", "0")
    names = [n for n in os.listdir(directory) if n.endswith(".log")] \
        if os.path.isdir(directory) else []
    return b"".join(open(os.path.join(directory, n), "rb").read() for n in sorted(names))


def _registered(connect: str, where: str = paths.BROKER_IDS) -> bool:
    zk = chroot_client(connect)
    try:
        return bool(zk.exists(where) and zk.get_children(where))
    finally:
        zk.stop()
        zk.close()
