"""ACLs on the wire (issue 30, points 3 and 7) with real brokers, a real
ZooKeeper holding users and ACLs: each principal gets what its entries
allow and nothing more; every refusal carries its own error code and leaves
the log and the topics unchanged; an ACL added or removed in ZooKeeper
takes effect without a restart; deny wins over allow; a TLS client
certificate's subject is a principal too."""
from __future__ import annotations

import os

import pytest

from broker.client.authentication import SaslLogin
from broker.client.connection import BrokerConnection, BrokerConnectionError, parse_address
from broker.client.producer import Producer
from broker.protocol import api
from broker.protocol.api import Acks
from broker.protocol.errors import ErrorCode, SamsaError
from broker.protocol.scram import ScramCredential
from broker.security import store
from broker.security.acl import AclEntry
from broker.security.ca import CertificateAuthority
from broker.security.tls import TlsSettings, client_context
from broker_helpers import scram_connection, message_set, metric, scrape_metrics, wait_until

PASSWORDS = {"admin": "admin-secret", "reader": "reader-secret", "writer": "writer-secret"}


def allow(principal, operation, resource_type, name, pattern="literal"):
    return AclEntry(principal, "allow", operation, resource_type, name, pattern)


@pytest.fixture
def acl_broker(broker_factory, zookeeper, zk_client, zk_chroot):
    """SCRAM on the plaintext port, ACLs on; admin a super user; reader may
    read (and so describe) every topic named pv-*; writer may write
    pv-clicks."""
    for user, password in PASSWORDS.items():
        store.set_user(zk_client, user, ScramCredential.from_password(password))
    store.add_acls(zk_client, [
        allow("User:reader", "read", "topic", "pv-", "prefixed"),
        allow("User:writer", "write", "topic", "pv-clicks"),
    ])
    broker = broker_factory({"zookeeper": zookeeper.connect_string() + zk_chroot,
                             "authentication": "scram", "authorization": True,
                             "super_users": "User:admin"}, metrics_port=0)
    return broker, zk_client


def login(broker, user) -> BrokerConnection:
    return scram_connection(broker.address, user, PASSWORDS[user])


def produce(conn, topic, value, acks=Acks.FLUSHED):
    return conn.request(api.ProduceRequest(acks, 10_000, (
        api.ProduceEntry(topic, 0, message_set([value])),)))


def fetch(conn, topic):
    return conn.request(api.FetchRequest(0, 1, (api.FetchEntry(topic, 0, 0, 1 << 20),)))


def refused(call, code=ErrorCode.TOPIC_AUTHORIZATION_FAILED) -> str:
    with pytest.raises(SamsaError) as info:
        call()
    assert info.value.code == code, info.value
    return info.value.message


def sizes(admin, topic) -> list[int]:
    info = admin.request(api.MetadataRequest((topic,))).topics[0]
    return [p.size_bytes for p in info.partitions] if info.error == 0 else None


def test_each_principal_gets_exactly_what_its_acls_allow(acl_broker):
    broker, _zk = acl_broker
    admin, reader, writer = (login(broker, u) for u in ("admin", "reader", "writer"))
    try:
        admin.request(api.CreateTopicRequest("pv-clicks", 1))
        admin.request(api.CreateTopicRequest("private", 1))
        assert produce(admin, "pv-clicks", b"by admin").results[0].error == 0
        assert produce(admin, "private", b"secret").results[0].error == 0
        assert produce(writer, "pv-clicks", b"by writer").results[0].error == 0
        before = sizes(admin, "pv-clicks")

        # the writer may write, not read, and nothing else
        assert "read topic 'pv-clicks'" in refused(lambda: fetch(writer, "pv-clicks"))
        refused(lambda: produce(writer, "private", b"x"))
        # the reader may read pv-*, not write it, delete it or create in it
        assert fetch(reader, "pv-clicks").results[0].error == 0
        message = refused(lambda: produce(reader, "pv-clicks", b"not allowed"))
        assert message == "not authorized to write topic 'pv-clicks'"
        refused(lambda: reader.request(api.DeleteTopicRequest("pv-clicks")))
        refused(lambda: reader.request(api.CreateTopicRequest("pv-new", 1)))
        refused(lambda: produce(reader, "pv-brand-new", b"would auto-create"))
        refused(lambda: fetch(reader, "private"))
        refused(lambda: reader.request(api.OffsetsRequest("private", 0, -1, 1)))
        refused(lambda: reader.request(api.ReplicaFetchRequest(
            7, 0, 1, (api.ReplicaFetchEntry("pv-clicks", 0, 0, 0, 1 << 20),))),
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        # metadata for all topics lists only what the principal may describe
        assert [t.name for t in reader.request(api.MetadataRequest(())).topics] == \
            ["pv-clicks"]
        assert sorted(t.name for t in admin.request(api.MetadataRequest(())).topics) == \
            ["private", "pv-clicks"]
        # acks=0 cannot carry the refusal: the connection is closed
        reader.send(api.ProduceRequest(Acks.NONE, 10_000, (
            api.ProduceEntry("pv-clicks", 0, message_set([b"fire and forget"])),)),
            expect_response=False)
        with pytest.raises(BrokerConnectionError):
            reader.request(api.MetadataRequest(()))

        # nothing refused changed anything
        assert sizes(admin, "pv-clicks") == before
        names = sorted(t.name for t in admin.request(api.MetadataRequest(())).topics)
        assert names == ["private", "pv-clicks"]
        samples = scrape_metrics(broker.metrics_port)
        assert metric(samples, "samsa_authorization_denials_total", operation="write",
                      resource_type="topic") >= 3
    finally:
        for conn in (admin, reader, writer):
            conn.close()


def test_acls_change_in_zookeeper_take_effect_without_restart(acl_broker):
    broker, zk = acl_broker
    admin, reader = login(broker, "admin"), login(broker, "reader")
    try:
        admin.request(api.CreateTopicRequest("pv-views", 1))
        refused(lambda: produce(reader, "pv-views", b"x"))
        grant = allow("User:reader", "write", "topic", "pv-views")
        store.add_acls(zk, [grant])
        wait_until(lambda: _succeeds(lambda: produce(reader, "pv-views", b"now allowed")),
                   what="the broker to take the new ACL from its watch")
        store.remove_acls(zk, [grant])
        wait_until(lambda: not _succeeds(lambda: produce(reader, "pv-views", b"x")),
                   what="the broker to drop the removed ACL")
        # deny wins over the prefixed allow
        assert fetch(reader, "pv-views").results[0].error == 0
        store.add_acls(zk, [AclEntry("User:reader", "deny", "read", "topic", "pv-views")])
        wait_until(lambda: not _succeeds(lambda: fetch(reader, "pv-views")),
                   what="the deny entry to win")
        assert "read topic 'pv-views'" in refused(lambda: fetch(reader, "pv-views"))
    finally:
        admin.close()
        reader.close()


def _succeeds(call) -> bool:
    try:
        call()
        return True
    except SamsaError as exc:
        # REQUEST_TIMED_OUT: the broker has just started and not read its ACLs yet
        assert exc.code in (ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                            ErrorCode.REQUEST_TIMED_OUT), exc
        return False


def test_a_client_certificate_is_a_principal(broker_factory, zookeeper, zk_client, zk_chroot,
                                             tmp_path):
    ca = CertificateAuthority.create(str(tmp_path / "ca"))
    cert, key = ca.issue("broker-0", ["localhost", "127.0.0.1"], str(tmp_path / "certs"))
    good = ca.issue("loader", [], str(tmp_path / "certs"))
    other = ca.issue("stranger", [], str(tmp_path / "certs"))
    store.add_acls(zk_client, [allow("User:CN=loader", "write", "topic", "events"),
                               allow("User:CN=loader", "create", "topic", "events")])
    broker = broker_factory({"zookeeper": zookeeper.connect_string() + zk_chroot,
                             "tls_port": 0, "tls_cert_file": cert, "tls_key_file": key,
                             "tls_ca_file": ca.cert_path, "tls_client_auth": "required",
                             "tls_authentication": "certificate", "authorization": True},
                            metrics_port=0)

    def connection(pair):
        host, port = parse_address(broker.tls_address)
        conn = BrokerConnection(host, port, "tests", request_timeout=10, tls=client_context(
            TlsSettings(pair[0], pair[1], ca.cert_path)))
        conn.connect()
        return conn

    with connection(good) as conn:
        wait_until(lambda: _succeeds(lambda: produce(conn, "events", b"by loader")),
                   what="the broker to read its ACLs")
    with connection(other) as conn:
        refused(lambda: produce(conn, "events", b"by a stranger"))
    # the plaintext port (authentication "none"): User:ANONYMOUS, allowed nothing
    host, port = parse_address(broker.address)
    with BrokerConnection(host, port, "tests", request_timeout=10) as conn:
        refused(lambda: produce(conn, "events", b"anonymous"))
        assert conn.request(api.MetadataRequest(())).topics == ()


def test_before_it_has_read_the_acls_a_broker_answers_retry(broker_factory):
    """A broker whose ZooKeeper does not answer has not read its ACLs: every
    request of a principal who is no super user is answered REQUEST_TIMED_OUT
    (clients retry), nothing refused for good and nothing served."""
    from broker_helpers import unused_port
    broker = broker_factory({"zookeeper": f"127.0.0.1:{unused_port()}/nowhere",
                             "authorization": True, "super_users": "User:admin"})
    host, port = parse_address(broker.address)
    with BrokerConnection(host, port, "tests", request_timeout=10) as conn:
        for request in (api.MetadataRequest(()),
                        api.FetchRequest(0, 1, (api.FetchEntry("events", 0, 0, 1 << 20),)),
                        api.ProduceRequest(Acks.FLUSHED, 10_000, (
                            api.ProduceEntry("events", 0, message_set([b"x"])),))):
            with pytest.raises(SamsaError) as info:
                conn.request(request)
            assert info.value.code == ErrorCode.REQUEST_TIMED_OUT
            assert "has not read its ACLs from ZooKeeper yet; retry" in str(info.value)
    assert not os.path.exists(os.path.join(broker.data_dir, "topics", "events"))
