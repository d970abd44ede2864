"""The secured lab (issue 30, point 6): ``python -m infra.local up`` runs
secured unless ``--insecure`` (or the topology says), with a certificate
authority, a certificate per broker host, SCRAM users and ACLs per service
and ZooKeeper identities made on the spot; the services work with exactly
what they were given, and whoever was given nothing gets nothing in."""
from __future__ import annotations

import dataclasses
import os
import stat

import pytest
from cryptography import x509
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import make_acl

from broker.client.connection import BrokerConnection, parse_address
from broker.client.producer import Producer
from broker.harness.zookeeper import server_mode
from broker.protocol import api
from broker.protocol.errors import ErrorCode, SamsaError
from broker.security.ca import CertificateAuthority
from broker_helpers import run_module, wait_until
from infra.local.demo import count_in
from infra.local.lab import Lab, LabError, free_topology
from infra.local.lab_security import (ADMIN, AUDIT_TOPIC, LAG, MIRROR, PRODUCER, USERS,
                                      LabSecurity, cluster_acls)
from infra.local.network.runner import missing_requirements
from infra.topology import NetworkSpec, SecuritySpec, ZooKeeperSpec, to_toml
from lab_helpers import small_topology


def _lab(*args: str) -> tuple[int, str, str]:
    done = run_module("infra.local", *args, timeout=120)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def _enabled(printed: str) -> bool:
    after = printed.split("[security]", 1)[1]
    return after.split("enabled = ", 1)[1].split()[0] == "true"


def test_up_is_secured_unless_insecure_or_the_topology_says(tmp_path):
    code, out, err = _lab("up", "--print-config")
    assert code == 0 and _enabled(out), err
    code, out, err = _lab("up", "--print-config", "--insecure")
    assert code == 0 and not _enabled(out), err
    open_file = tmp_path / "open.toml"
    open_file.write_text(to_toml(small_topology()))          # says enabled = false
    code, out, err = _lab("up", "--print-config", "--topology", str(open_file))
    assert code == 0 and not _enabled(out), err


def test_each_service_is_given_exactly_what_it_needs():
    t = small_topology(mirror=True)
    granted = {c: {(e.principal, e.operation.value, e.resource_type.value, e.name)
                   for e in cluster_acls(t, c)} for c in ("dc-a", "analysis")}
    audit = {("User:audit", "read", "topic", "*"), ("User:audit", "read", "group", "audit-"),
             ("User:audit", "read", "group", "samsa-audit-"),
             ("User:audit", "write", "topic", "_audit"), ("User:audit", "create", "topic", "_audit"),
             ("User:lag", "describe", "topic", "*"), ("User:lag", "describe", "group", "*")}
    assert granted["dc-a"] == audit | {
        ("User:producer", "write", "topic", "*"), ("User:producer", "create", "topic", "*"),
        ("User:mirror", "read", "topic", "*"), ("User:mirror", "read", "group",
                                                "mirror-to-analysis")}
    assert granted["analysis"] == audit | {
        ("User:mirror", "write", "topic", "*"), ("User:mirror", "create", "topic", "*"),
        ("User:loader", "read", "topic", "*"), ("User:loader", "write", "topic", "_audit"),
        ("User:loader", "create", "topic", "_audit")}


def test_the_secrets_are_private_and_kept_across_a_second_prepare(tmp_path):
    t = small_topology(mirror=True)
    security = LabSecurity(str(tmp_path / "security")).prepare(t)
    paths = [security.password_file(u) for u in USERS] + \
        [security.zookeeper_identity_file(z) for z in ("cluster", "mirror", "registry")] + \
        [security.cert_files("dc-a.broker-0")[1], os.path.join(security.directory, "ca", "ca.key")]
    for path in paths:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
    for sub in ("", "ca", "certs", "users", "zookeeper", "client"):
        mode = stat.S_IMODE(os.stat(os.path.join(security.directory, sub)).st_mode)
        assert mode == 0o700, sub
    before = {p: open(p).read() for p in paths}
    LabSecurity(security.directory).prepare(t)
    assert {p: open(p).read() for p in paths} == before


def test_a_certificate_near_its_end_is_issued_again(tmp_path):
    t = small_topology()
    security = LabSecurity(str(tmp_path / "security")).prepare(t)
    cert, _key = security.cert_files("dc-a.broker-0")
    ca = CertificateAuthority.open(os.path.dirname(security.ca_file))
    ca.issue("dc-a.broker-0", ["127.0.0.1", "localhost"], os.path.dirname(cert), days=10)
    ending = x509.load_pem_x509_certificate(open(cert, "rb").read()).not_valid_after_utc
    security.prepare(t)
    renewed = x509.load_pem_x509_certificate(open(cert, "rb").read()).not_valid_after_utc
    assert (renewed - ending).days > 300


def test_the_written_credentials_read_back_as_the_services_take_them(tmp_path):
    from broker.client.authentication import ClientSecurity
    from broker.service_kit import settings
    from hadoop_loader.config import LoaderConfig, read_settings
    security = LabSecurity(str(tmp_path / "security")).prepare(small_topology())
    client = settings.load(ClientSecurity, security.client_config(ADMIN))
    assert client.settings() == {**ClientSecurity().settings(),
                                 **security.client_settings(ADMIN)}
    config = tmp_path / "warehouse.toml"
    config.write_text('[loader]\nzookeeper = "127.0.0.1:2181/analysis"\n\n'
                      + security.credentials_toml("loader", "loader.credentials"))
    assert settings.load(LoaderConfig, str(config), table="loader").credentials == \
        security.credentials("loader")
    # what a secured lab adds to the DAGs' settings: the audit asked as the
    # reader airflow, the loader's user and ZooKeeper identity
    config.write_text('[loader]\nzookeeper = "127.0.0.1:2181/analysis"\n\n'
                      '[warehouse]\naudit_url = "https://127.0.0.1:8090"\n'
                      + security.warehouse_toml())
    loader, warehouse = read_settings(str(config))
    assert loader.credentials == security.credentials("loader", "loader")
    assert (warehouse.audit_ca_file, warehouse.audit_username, warehouse.audit_password_file) \
        == (security.ca_file, "airflow", security.http_password_file("airflow"))
    assert warehouse.audit_credentials.headers()["Authorization"].startswith("Basic ")
    options = security.credential_options("audit", "cluster")
    assert dict(o.split("=", 1) for o in options[1::2]) == {
        "credentials.sasl_username": "audit",
        "credentials.sasl_password_file": security.password_file("audit"),
        "credentials.tls": "true", "credentials.tls_ca_file": security.ca_file,
        "credentials.zookeeper_auth_file": security.zookeeper_identity_file("cluster"),
        "credentials.zookeeper_tls": "true", "credentials.zookeeper_tls_ca_file": security.ca_file}


def test_the_audit_topic_of_the_acls_is_the_audits():
    from audit.counting import AUDIT_TOPIC as audit_topic
    assert AUDIT_TOPIC == audit_topic


def test_a_lab_does_not_switch_between_open_and_secured_over_its_data(tmp_path):
    state = tmp_path / "lab"
    (state / "zookeeper").mkdir(parents=True)           # data a start in the open left
    secured = dataclasses.replace(free_topology(small_topology()),
                                  security=SecuritySpec(enabled=True))
    with pytest.raises(LabError, match="ran open, and its ZooKeeper data is kept"):
        Lab(secured, str(state)).up(timeout=5)
    assert not (state / "lab.json").exists() or not Lab.open(str(state)).records
    (state / "security-mode").write_text("secured\n")
    with pytest.raises(LabError, match="ran secured"):
        Lab(free_topology(small_topology()), str(state)).up(timeout=5)


@pytest.mark.timeout(300)
def test_a_secured_lab_serves_its_services_and_refuses_strangers(tmp_path):
    topology = free_topology(small_topology(dc_brokers=2, analysis_brokers=1, mirror=True))
    # an ensemble of three, whose members speak TLS to each other too
    topology = dataclasses.replace(topology, security=SecuritySpec(enabled=True),
                                   zookeeper=ZooKeeperSpec(size=3))
    topology = free_topology(topology)
    topology_file = tmp_path / "topology.toml"
    topology_file.write_text(to_toml(topology))
    state = tmp_path / "lab"
    try:
        code, out, err = _lab("up", "--topology", str(topology_file), "--dir", str(state),
                              "--no-monitoring")
        assert code == 0, err
        assert "secured: TLS listeners asking for SCRAM-SHA-512" in out
        lab = Lab.open(str(state))
        security = lab.security
        # the layout's broker ports are the TLS listeners, registered for TLS clients
        assert f"0={topology.host}:{topology.broker_ports('dc-a')[0]}" in out

        lb = lab.lb_address("dc-a")
        for tls in ({}, {"tls": True, "tls_ca_file": security.ca_file}):
            with Producer(bootstrap=lb, acks="flushed", retries=0, partitioner="any",
                          **tls) as p:
                p.send("clicks", b"from a stranger", key=None)
                p.flush(30)
                assert p.failed_batches == 1     # no user (in clear or over TLS): nothing in
        with Producer(bootstrap=lb, acks="flushed", partitioner="any",
                      **security.client_settings(PRODUCER)) as p:
            for i in range(50):
                p.send("clicks", b"click %d" % i, key=None)
            p.flush(60)
            assert p.failed_batches == 0
        # the mirror (its own user) copies them; the admin reads them in analysis
        analysis = lab.broker_addresses("analysis")
        wait_until(lambda: count_in(analysis, "clicks", security) >= 50, 60,
                   what="the mirror to copy the clicks")

        # the producer may write, not read; the lag service may describe, not write
        for address in lab.broker_addresses("dc-a"):
            host, port = parse_address(address)
            with BrokerConnection(host, port, "tests", request_timeout=10,
                                  **security.admin_options(PRODUCER)) as conn:
                with pytest.raises(SamsaError) as refused:
                    conn.request(api.FetchRequest(0, 1, (api.FetchEntry("clicks", 0, 0,
                                                                        1 << 16),)))
                assert refused.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        broker = lab.broker_address("dc-a", 0)
        with Producer(bootstrap=broker, acks="flushed", retries=0, partitioner="any",
                      **security.client_settings(LAG)) as p:
            p.send("clicks", b"from the lag service", key=None)
            p.flush(30)
            assert p.failed_batches == 1
        assert count_in(analysis, "clicks", security) == 50

        # ZooKeeper serves TLS alone on its client port: a plaintext client,
        # or one that does not trust the lab's authority, gets no session
        for options in ({}, {"use_ssl": True, "verify_certs": True}):
            refused_client = KazooClient(hosts=lab.zookeeper_connect("dc-a"), timeout=3,
                                         **options)
            with pytest.raises(KazooTimeoutError):
                refused_client.start(timeout=4)
            refused_client.stop()
            refused_client.close()
        # the members' quorum and election ports are TLS (sslQuorum) and the
        # ensemble formed over them
        for member in (1, 2, 3):
            zoo_cfg = state / "zookeeper" / f"zk-{member}" / "zoo.cfg"
            assert "sslQuorum=true" in zoo_cfg.read_text()
        modes = sorted(str(server_mode(topology.host, port, tls=lab.zookeeper_probe_context()))
                       for port in topology.zookeeper_client_ports())
        assert modes == ["follower", "follower", "leader"], modes
        # a stranger over TLS (the authority's certificate is no secret)
        # reads the registry, cannot read the users or register a broker
        stranger = KazooClient(hosts=lab.zookeeper_connect("dc-a"), timeout=10,
                               **lab.zookeeper_tls().kazoo_options())
        stranger.start(timeout=15)
        try:
            assert stranger.get_children("/brokers/ids") == ["0", "1"]
            with pytest.raises(NoAuthError):
                stranger.get_children("/security/users")
            with pytest.raises(NoAuthError):
                stranger.create("/brokers/ids/7", b"127.0.0.1:1")
            # the chroot is the cluster's: a stranger cannot delete what it
            # holds, nor take it over
            with pytest.raises(NoAuthError):
                stranger.delete("/brokers", recursive=True)
            with pytest.raises(NoAuthError):
                stranger.set_acls("/", [make_acl("world", "anyone", all=True)])
        finally:
            stranger.stop()
            stranger.close()
        for user in (ADMIN, MIRROR):
            assert (state / "security" / "client" / f"{user}.toml").exists()
    finally:
        if (state / "lab.json").exists():
            Lab.open(str(state)).down()


@pytest.mark.skipif(bool(missing_requirements()), reason="the netns runtime needs "
                    + ", ".join(missing_requirements()))
@pytest.mark.timeout(300)
def test_a_secured_lab_in_network_namespaces(tmp_path):
    """Each broker's certificate holds its own host's address in the network
    lab: the producer (from this machine) reaches dc-a's load balancer over
    TLS as its user, and the mirror copies across to analysis as its own."""
    topology = dataclasses.replace(
        small_topology(dc_brokers=2, analysis_brokers=1, mirror=True),
        network=NetworkSpec(subnet="10.85.0.0/16"), security=SecuritySpec(enabled=True))
    lab = Lab(topology, str(tmp_path / "lab"), runtime="netns")
    lab.up(timeout=90, monitoring=False)
    try:
        security = lab.security
        with Producer(bootstrap=lab.lb_address("dc-a"), acks="flushed", partitioner="any",
                      **security.client_settings(PRODUCER)) as p:
            for i in range(50):
                p.send("clicks", b"click %d" % i, key=None)
            p.flush(60)
            assert p.failed_batches == 0
        wait_until(lambda: count_in(lab.broker_addresses("analysis"), "clicks", security)
                   >= 50, 60, what="the mirror to copy the clicks across")
        assert lab.broker_address("analysis", 0).startswith("10.85.")
        # each datacenter's ZooKeeper answers over TLS alone, its certificate
        # naming its own host's address
        for cluster in ("dc-a", "analysis"):
            ((_host, address, port),) = lab.topology.zookeeper_members(cluster)
            assert server_mode(address, port) is None
            assert server_mode(address, port, tls=lab.zookeeper_probe_context()) == "standalone"
    finally:
        lab.down(timeout=20)


def _http(url: str, access=None, method: str = "GET", body: bytes | None = None,
          ca_file: str | None = None) -> int:
    """The status of a request (an HTTPError's code too)."""
    import ssl
    import urllib.error
    import urllib.request
    headers = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
    if access is not None:
        headers.update(access.headers())
        ca_file = access.ca_file
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    context = ssl.create_default_context(cafile=ca_file) if url.startswith("https") else None
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.timeout(300)
def test_a_secured_labs_http_ports_serve_https_to_its_users_and_prometheus_scrapes_them(
        tmp_path):
    """Every HTTP port of a secured lab (each broker's and mirror's /metrics,
    the schema registries, the lag service, the load balancer's stats page)
    serves HTTPS alone and asks for one of the lab's HTTP users; Prometheus
    scrapes each as ``prometheus`` (every target up); that reader may not
    register a schema, the admin may."""
    from infra.local import prometheus
    from infra.local.lab_security import HTTP_ADMIN, HTTP_READER
    topology = dataclasses.replace(
        free_topology(small_topology(dc_brokers=1, analysis_brokers=1, mirror=True)),
        security=SecuritySpec(enabled=True))
    lab = Lab(topology, str(tmp_path / "lab"))
    lab.up(timeout=90, monitoring=True)
    try:
        security = lab.security
        admin, reader = security.http_access(HTTP_ADMIN), security.http_access(HTTP_READER)
        host = topology.host
        ports = {"broker": topology.broker_metrics_ports("dc-a")[0],
                 "mirror": topology.mirror_metrics_ports("to-analysis")[0],
                 "lag": lab.records["lag"].ports["http"],
                 "registry": lab.records["registry-analysis"].ports["http"]}
        assert -1 not in ports.values()
        paths = {"broker": "/metrics", "mirror": "/metrics", "lag": "/metrics",
                 "registry": "/subjects"}
        for name, port in ports.items():
            url = f"https://{host}:{port}{paths[name]}"
            with pytest.raises(OSError):          # no plain HTTP on a secured port
                _http(f"http://{host}:{port}{paths[name]}")
            assert _http(url, ca_file=security.ca_file) == 401, name   # no user
            assert _http(url, reader) == 200, name
            assert _http(f"https://{host}:{port}/healthz", ca_file=security.ca_file) == 200
        assert lab.schema_registry_url("analysis").startswith("https://")
        # HAProxy's stats page (no /healthz of its own): HTTPS, a user
        stats_host = topology.address_of("dc-a.haproxy")
        stats = f"{stats_host}:{topology.lb_stats_port('dc-a')}/"
        with pytest.raises(OSError):
            _http(f"http://{stats}")
        assert _http(f"https://{stats}", ca_file=security.ca_file) == 401
        assert _http(f"https://{stats}", reader) == 200
        assert _http(f"https://{stats}", admin) == 200
        config = os.path.join(lab.state_dir, "haproxy", "dc-a", "haproxy.cfg")
        assert os.stat(config).st_mode & 0o077 == 0        # its passwords: the owner's alone
        # the reader may read the registry, not write it; the admin may
        schema = b'{"schema": "{\\"type\\": \\"string\\"}"}'
        subject = f"https://{host}:{ports['registry']}/subjects/probe-value/versions"
        assert _http(subject, reader, "POST", schema) == 403
        assert _http(subject, admin, "POST", schema) == 200

        # Prometheus's own web server: HTTPS, a user asked for
        url = lab.prometheus_url()
        assert url.startswith("https://")
        # plain HTTP: Go's TLS server answers 400 ("an HTTP request to an HTTPS server")
        assert _http(url.replace("https://", "http://") + "/-/ready") == 400
        assert _http(f"{url}/-/ready", ca_file=security.ca_file) == 401
        assert _http(f"{url}/api/v1/targets", reader) == 200
        with pytest.raises(prometheus.PrometheusError, match="did not answer"):
            prometheus.targets(url)
        # Prometheus scrapes every target over HTTPS as its user
        found = prometheus.targets(url, admin)
        wait_until(lambda: all(t["health"] == "up" for t in prometheus.targets(url, admin)),
                   60, interval=0.5,
                   what=lambda: f"every target up: {prometheus.targets(url, admin)}")
        scraped = {t["labels"]["job"] for t in found}
        assert {prometheus.BROKER_JOB, prometheus.MIRROR_JOB, prometheus.LAG_JOB,
                prometheus.SCHEMA_REGISTRY_JOB} <= scraped
        assert all(t["scrapeUrl"].startswith("https://") for t in found)
        # status reads the mirror's metrics as the admin
        code, out, err = _lab("status", "--dir", lab.state_dir, "--json")
        assert code == 0, err
        import json
        status = json.loads(out)
        assert status["lag_service"].startswith("https://")
        assert status["prometheus"]["url"] == url and \
            status["prometheus"]["targets_up"] == len(found), status["prometheus"]
        dc_a = next(c for c in status["clusters"] if c["name"] == "dc-a")
        assert dc_a["load_balancer"]["stats_url"] == f"https://{stats}"
        assert all(p["metrics"] for m in status["mirrors"] for p in m["processes"]), status
    finally:
        lab.down(timeout=20)


def test_the_http_users_are_made_whole_again_when_a_file_is_missing(tmp_path):
    """A lab made before a user was added, or a password file lost: the next
    prepare makes the users file and every password again, and a client
    that lost its password file gets an error naming it (not "no answer")."""
    from infra.local.lab_security import HTTP_USERS
    from infra.local.metrics import open_url, scrape
    security = LabSecurity(str(tmp_path / "security")).prepare(small_topology())
    lost = security.http_password_file("airflow")
    os.remove(lost)
    with pytest.raises(ValueError, match=f"the HTTP password file {lost}: No such file"):
        open_url("https://127.0.0.1:1/", security.http_access("airflow"))
    with pytest.raises(ValueError, match=f"the HTTP password file {lost}"):
        scrape("127.0.0.1", 1, access=security.http_access("airflow"))
    users_before = (tmp_path / "security" / "http" / "users").read_text()
    security.prepare(small_topology())
    assert os.path.exists(lost)
    users = (tmp_path / "security" / "http" / "users").read_text()
    assert users != users_before
    assert sorted(tuple(line.split()[:2]) for line in users.splitlines()
                  if line.strip() and not line.startswith("#")) == sorted(HTTP_USERS)
    assert stat.S_IMODE(os.stat(lost).st_mode) == 0o600
