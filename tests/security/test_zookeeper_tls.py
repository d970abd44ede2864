"""TLS to ZooKeeper (issue 30, point 1), with a real ZooKeeper whose only
client port is TLS and asks for a client certificate: the ways in that must
fail (plaintext, no certificate, another authority's, a wrong host name),
and the pipeline's parts that must get in: a broker registers, a cluster
producer and a group consumer find it, the mirror copies between two such
clusters, the operators' tools and the schema registry's commands work."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from broker.security.credentials import ServiceCredentials
from broker.client.cluster_producer import ClusterProducer
from broker.client.group_consumer import GroupConsumer, GroupConsumerConfig
from broker.coordination import paths
from broker.coordination.named_cluster import NamedCluster
from broker.coordination.zk import ZooKeeperUnavailable, make_client, start_client
from broker.coordination.zk_tls import ZooKeeperTls
from broker.harness.zookeeper import ZooKeeperEnsemble, ZooKeeperServerTls
from broker.security.ca import CertificateAuthority
from broker_helpers import run_module, wait_until
from mirror.config import MirrorConfig
from mirror.mirror import Mirror


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    root = tmp_path_factory.mktemp("zk-pki")
    ca = CertificateAuthority.create(str(root / "ca"))
    stranger_ca = CertificateAuthority.create(str(root / "stranger-ca"), name="Stranger CA")
    certs = str(root / "certs")
    return {"ca": ca.cert_path,
            # the server's certificate names its address, not "localhost"
            "zookeeper": ca.issue("zookeeper", ["127.0.0.1"], certs),
            "client": ca.issue("samsa-client", [], certs),
            "stranger": stranger_ca.issue("stranger", [], str(root / "stranger-certs")),
            "stranger_ca": stranger_ca.cert_path}


@pytest.fixture(scope="module")
def tls_zookeeper(pki, tmp_path_factory):
    """A ZooKeeper with a TLS client port alone (client certificates needed)."""
    cert, key = pki["zookeeper"]
    probe_cert, probe_key = pki["client"]
    ensemble = ZooKeeperEnsemble(1, str(tmp_path_factory.mktemp("zookeeper-tls")),
                                 tls=ZooKeeperServerTls(cert, key, pki["ca"],
                                                        client_auth="need", plaintext=False,
                                                        probe_cert_file=probe_cert,
                                                        probe_key_file=probe_key))
    ensemble.start()
    yield ensemble
    ensemble.stop()


def client_tls(pki) -> ZooKeeperTls:
    cert, key = pki["client"]
    return ZooKeeperTls(True, pki["ca"], cert, key)


def tls_settings(pki) -> dict:
    """The zookeeper_tls* settings of a broker, a group consumer or [credentials]."""
    cert, key = pki["client"]
    return {"zookeeper_tls": True, "zookeeper_tls_ca_file": pki["ca"],
            "zookeeper_tls_cert_file": cert, "zookeeper_tls_key_file": key}


def connects(hosts: str, **options) -> bool:
    client = KazooClient(hosts=hosts, timeout=3, **options)
    try:
        client.start(timeout=4)
        client.get_children("/")
        return True
    except KazooTimeoutError:
        return False
    finally:
        client.stop()
        client.close()


def test_only_tls_with_a_trusted_certificate_and_the_right_name_gets_in(tls_zookeeper, pki):
    hosts = tls_zookeeper.connect_string(tls=True)
    port = hosts.rsplit(":", 1)[1]
    cert, key = pki["client"]
    good = {"use_ssl": True, "ca": pki["ca"], "certfile": cert, "keyfile": key,
            "check_hostname": True}
    assert connects(hosts, **good)
    assert not connects(hosts)                                          # plaintext
    assert not connects(hosts, **{**good, "certfile": None, "keyfile": None})  # no certificate
    s_cert, s_key = pki["stranger"]
    assert not connects(hosts, **{**good, "certfile": s_cert, "keyfile": s_key})  # not trusted
    assert not connects(f"localhost:{port}", **good)        # not the name on its certificate
    assert connects(f"localhost:{port}", **{**good, "check_hostname": False})
    # the project's own client, through the settings
    client = make_client(hosts, tls=client_tls(pki))
    start_client(client, hosts + "/made-over-tls", timeout=10)
    client.stop()
    client.close()
    with pytest.raises(ValueError, match="cannot read"):
        make_client(hosts, tls=ZooKeeperTls(True, "/nonexistent/ca.crt"))


def test_the_projects_clients_trust_the_authority_named_and_remake_tls_only_on_a_change(
        tls_zookeeper, pki, tmp_path):
    """Through the settings (ZooKeeperTls), a client's handler makes one TLS
    context for all its connections, made again when a file changes; it
    refuses the right server under another authority and a wrong name."""
    import shutil
    hosts = tls_zookeeper.connect_string(tls=True)
    port = hosts.rsplit(":", 1)[1]
    cert, key = pki["client"]
    ca = str(tmp_path / "ca.crt")
    shutil.copyfile(pki["ca"], ca)
    tls = ZooKeeperTls(True, ca, cert, key)
    client = make_client(hosts, tls=tls)
    start_client(client, hosts, timeout=10)
    try:
        handler = client.handler
        first = handler.context()
        client.get_children("/")
        assert handler.context() is first              # one context, not one per connection
        os.utime(ca, ns=(1, 1))                        # a renewed file (another stamp)
        renewed = handler.context()
        assert renewed is not first and handler.context() is renewed
    finally:
        client.stop()
        client.close()
    for refused in (ZooKeeperTls(True, pki["stranger_ca"], cert, key),  # another authority
                    ZooKeeperTls(True, ca, cert, key)):                 # a wrong name (below)
        where = hosts if refused.ca_file != ca else f"localhost:{port}"
        other = make_client(where, tls=refused)
        with pytest.raises(ZooKeeperUnavailable):
            start_client(other, where, timeout=3)
        other.close()


def test_brokers_clients_and_the_mirror_work_over_tls_zookeeper(tls_zookeeper, pki,
                                                              broker_factory):
    src = tls_zookeeper.connect_string("/src", tls=True)
    dst = tls_zookeeper.connect_string("/dst", tls=True)
    for connect in (src, dst):
        broker_factory({"zookeeper": connect, "log.flush_ms": 10, **tls_settings(pki)})
    check = make_client(src, tls=client_tls(pki))
    start_client(check, src)
    try:
        wait_until(lambda: check.exists(paths.broker_id_path(0)), 20,
                   what="the broker to register over TLS")
    finally:
        check.stop()
        check.close()

    with ClusterProducer(src, acks="flushed", zookeeper_tls=client_tls(pki)) as producer:
        for i in range(100):
            producer.send("events", b"event-%d" % i)
        producer.flush(timeout=30)
    with GroupConsumer(GroupConsumerConfig(src, "readers", topics=("events",),
                                           **tls_settings(pki))) as consumer:
        got = []
        wait_until(lambda: got.extend(m.value for m in consumer.poll(500)) or len(got) >= 100,
                   30, what=lambda: f"the group to read all 100 ({len(got)})")
    assert sorted(got) == sorted(b"event-%d" % i for i in range(100))

    mirror = Mirror(MirrorConfig(
        sources=(NamedCluster("src", src),), target=NamedCluster("dst", dst),
        group="mirror", metrics_port=-1, commit_interval_ms=200,
        credentials=ServiceCredentials(**tls_settings(pki)))).start()
    try:
        wait_until(lambda: mirror.copied >= 100, 60, what="the mirror to copy everything")
    finally:
        mirror.close()


def test_the_tools_and_the_registry_take_tls_to_zookeeper(tls_zookeeper, pki, tmp_path):
    connect = tls_zookeeper.connect_string("/tools", tls=True)
    cert, key = pki["client"]
    flags = ("--zookeeper-tls-ca-file", pki["ca"], "--zookeeper-tls-cert-file", cert,
             "--zookeeper-tls-key-file", key)
    password = tmp_path / "alice.pw"
    password.write_text("alice-pw\n")
    added = run_module("broker.tools", "users", "add", "alice", "--password-file",
                       str(password), "--zookeeper", connect, "--timeout", "5", *flags)
    assert added.returncode == 0, added.stderr
    listed = run_module("broker.tools", "users", "list", "--zookeeper", connect, *flags)
    assert listed.returncode == 0 and b"alice" in listed.stdout, listed.stderr
    plain = run_module("broker.tools", "users", "list", "--zookeeper", connect,
                       "--timeout", "3")
    assert plain.returncode != 0 and b"cannot reach ZooKeeper" in plain.stderr
    unreadable = run_module("broker.tools", "users", "list", "--zookeeper", connect,
                            "--zookeeper-tls-ca-file", str(tmp_path / "missing.crt"))
    assert unreadable.returncode == 2 and b"cannot read" in unreadable.stderr

    env = {**os.environ, "SAMSA_ZOOKEEPER_TLS_CA_FILE": pki["ca"],
           "SAMSA_ZOOKEEPER_TLS_CERT_FILE": cert, "SAMSA_ZOOKEEPER_TLS_KEY_FILE": key}
    registry = f"zookeeper://{connect}"
    done = subprocess.run([sys.executable, "-m", "schemas", "--registry", registry, "register",
                           "page_views", "samsa.events.PageViewEvent"], env=env,
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    env_plain = {k: v for k, v in env.items() if not k.startswith("SAMSA_ZOOKEEPER_TLS")}
    refused = subprocess.run([sys.executable, "-m", "schemas", "--registry", registry,
                              "--timeout", "3", "list"], env=env_plain,
                             capture_output=True, timeout=60)
    assert refused.returncode == 3 and b"cannot reach ZooKeeper" in refused.stderr


def test_an_ensembles_members_speak_tls_to_each_other(pki, tmp_path):
    # sslQuorum: the quorum and election ports are TLS too, each member
    # presenting its certificate (the lab's ensembles run so, and the cloud's)
    import socket
    import ssl
    cert, key = pki["zookeeper"]
    ensemble = ZooKeeperEnsemble(3, str(tmp_path), tls=ZooKeeperServerTls(
        cert, key, pki["ca"], client_auth="none", plaintext=False, quorum=True))
    ensemble.start()
    try:
        modes = sorted(str(s.mode()) for s in ensemble.servers)
        assert modes == ["follower", "follower", "leader"], modes
        for server in ensemble.servers:
            assert "sslQuorum=true" in open(server.config_path).read()
        # written through one member, read through another: the quorum works over TLS
        clients = []
        for server in (ensemble.servers[0], ensemble.servers[2]):
            connect = f"{server.host}:{server.secure_port}"
            clients.append(make_client(connect, tls=ZooKeeperTls(True, pki["ca"])))
            start_client(clients[-1], connect)
        writer, reader = clients
        try:
            writer.create("/over-tls", b"agreed")
            reader.sync("/over-tls")
            assert reader.get("/over-tls")[0] == b"agreed"
        finally:
            for client in clients:
                client.stop()
                client.close()
        # an election port answers a TLS handshake (a member's certificate
        # presented) with the member's certificate
        member = ensemble.servers[0]
        context = ssl.create_default_context(cafile=pki["ca"])
        context.load_cert_chain(cert, key)
        with socket.create_connection((member.host, member.election_port), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname=member.host) as tls:
                assert tls.getpeercert()["subject"]
        # a peer whose certificate another authority issued is refused there
        stranger_cert, stranger_key = pki["stranger"]
        stranger = ssl.create_default_context(cafile=pki["ca"])
        stranger.load_cert_chain(stranger_cert, stranger_key)
        with pytest.raises(ssl.SSLError, match="CERTIFICATE|certificate|UNKNOWN_CA|unknown ca"):
            with socket.create_connection((member.host, member.election_port),
                                          timeout=5) as raw:
                with stranger.wrap_socket(raw, server_hostname=member.host) as tls:
                    # TLS 1.3: the server's refusal of the client's certificate
                    # (an alert) comes after the client's side of the handshake
                    tls.recv(1)
    finally:
        ensemble.stop()
