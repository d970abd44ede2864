"""The loader against a secured analysis cluster (issue 30): a broker whose
TLS port asks for SCRAM, ACLs enforced. ``python -m hadoop_loader`` with its
``[loader.credentials]`` plans, pulls in Spark tasks and publishes the
hadoop tier's counts over TLS as its own user; without them, or with a
wrong password, it fails saying so and commits nothing."""
from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest

from broker.client.authentication import SaslLogin
from broker.client.connection import BrokerConnection, parse_address
from broker.protocol import api
from broker.protocol.message import decode_message_set
from broker.protocol.scram import ScramCredential
from broker.security import store
from broker.security.acl import AclEntry
from broker.security.ca import CertificateAuthority
from broker.security.tls import TlsSettings, client_context
from broker_helpers import metric, scrape_metrics, wait_until
from cluster_helpers import chroot_client
from schemas import catalog
from schemas.registry import SchemaRegistry

from loader_helpers import BASE, produce, read_rows, rows_per_hour

USERS = {"admin": "admin-pw", "loader": "loader-pw"}


def loader(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hadoop_loader", *args], capture_output=True,
                          text=True, timeout=300)


@pytest.fixture
def secured_analysis(broker_factory, zookeeper, zk_chroot, tmp_path):
    """(cluster with .connect and .zk, registry, CA file, broker): users admin
    (super user) and loader (read page_views, write the audit topic)."""
    connect = zookeeper.connect_string(zk_chroot)
    zk = chroot_client(connect)
    for user, password in USERS.items():
        store.set_user(zk, user, ScramCredential.from_password(password))
    store.add_acls(zk, [
        AclEntry("User:loader", "allow", "read", "topic", "page_views"),
        AclEntry("User:loader", "allow", "write", "topic", "_audit"),
        AclEntry("User:loader", "allow", "create", "topic", "_audit")])
    ca = CertificateAuthority.create(str(tmp_path / "ca"))
    cert, key = ca.issue("broker", ["127.0.0.1", "localhost"], str(tmp_path / "certs"))
    broker = broker_factory({"zookeeper": connect, "log.flush_ms": 10,
                             "default_partitions": 2, "tls_port": 0, "tls_cert_file": cert,
                             "tls_key_file": key, "tls_authentication": "scram",
                             "authentication": "scram", "authorization": True,
                             "super_users": "User:admin"})
    registry = SchemaRegistry.open(f"zookeeper://{connect}")
    registry.register("page_views", catalog.load("samsa.events.PageViewEvent"))
    registry.register("page_views", catalog.load("samsa.events.PageViewEvent.v2"))
    try:
        yield types.SimpleNamespace(connect=connect, zk=zk), registry, ca.cert_path, broker
    finally:
        registry.close()
        zk.stop()
        zk.close()


def audit_events(broker, ca_file: str) -> int:
    """How many messages the audit topic holds, read as admin over TLS."""
    host, port = parse_address(broker.tls_address)
    count = 0
    with BrokerConnection(host, port, "tests", request_timeout=10,
                          tls=client_context(TlsSettings(ca_file=ca_file)),
                          sasl=SaslLogin("admin", USERS["admin"])) as conn:
        info = conn.request(api.MetadataRequest(("_audit",))).topics[0]
        for p in () if info.error else info.partitions:
            r = conn.request(api.FetchRequest(0, 1, (
                api.FetchEntry("_audit", p.partition, p.earliest, 4 << 20),))).results[0]
            count += len(decode_message_set(r.message_set, p.earliest, True, "_audit",
                                            p.partition)[0])
    return count


def test_the_loader_loads_a_secured_cluster_with_its_credentials(secured_analysis, tmp_path):
    cluster, registry, ca_file, broker = secured_analysis
    want = produce(cluster, registry, 60, BASE, sasl_username="admin",
                   sasl_password=USERS["admin"])
    password_file = tmp_path / "loader.pw"
    password_file.write_text(USERS["loader"] + "\n")
    os.chmod(password_file, 0o600)
    base = ("--zookeeper", cluster.connect, "--master", "local[2]",
            "--whitelist", "page_views", "--set", "credentials.tls=true",
            "--set", f"credentials.tls_ca_file={ca_file}")

    # no user, then a wrong password: refused, nothing loaded or committed
    wrong = tmp_path / "wrong.pw"
    wrong.write_text("not the password\n")
    for extra in ((), ("--set", "credentials.sasl_username=loader",
                       "--set", f"credentials.sasl_password_file={wrong}")):
        out = loader(*base, "--output", f"file://{tmp_path / 'refused'}", *extra)
        assert out.returncode == 1, out.stderr[-3000:]
        assert "nothing was committed" in out.stderr and "refused" in out.stderr
        assert "authenticat" in out.stderr and "Traceback" not in out.stderr
        assert read_rows(str(tmp_path / "refused")) == []

    out = loader(*base, "--output", f"file://{tmp_path / 'wh'}",
                 "--set", "credentials.sasl_username=loader",
                 "--set", f"credentials.sasl_password_file={password_file}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "60 messages" in out.stdout
    assert rows_per_hour(read_rows(str(tmp_path / "wh"))) == want
    assert "could not be published" not in out.stderr
    # the Spark tasks read at the TLS listener (the plaintext one would have
    # taken the same SCRAM user): fetched bytes are counted there, none
    # were sent by sendfile (the plaintext port's)
    samples = scrape_metrics(broker.metrics_port)
    assert (metric(samples, "samsa_tls_fetch_bytes_total") or 0) > 0
    assert not metric(samples, "samsa_sendfile_bytes_total")
    wait_until(lambda: audit_events(broker, ca_file) > 0, 30,
               what="the hadoop tier's counts in the audit topic")
