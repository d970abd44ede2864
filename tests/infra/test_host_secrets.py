"""What a cloud host does with its environment's secrets at boot
(infra/host_secrets.py; issue 30, point 6): reads them from the secret store
(here a stand-in speaking Secrets Manager's protocol, signatures checked,
each role granted only module secrets' readers), issues its certificate with
the environment's authority, and runs secured: a ZooKeeper serving TLS
alone, a broker on TLS with SCRAM and ACLs provisioned from the store, a
producer authenticating with its password from the store. And the ways it
must fail, each in one line: a secret the role may not read, an authority
not put yet, the wrong region."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import ssl
import stat
import subprocess
import sys

import pytest
from cryptography import x509

import cloud_helpers

from broker.client.cluster_producer import ClusterProducer
from broker.coordination.zk import make_client, start_client
from broker.coordination.zk_acls import Identity
from broker.harness.zookeeper import ZooKeeperEnsemble
from broker.security import store
from broker.security.ca import CertificateAuthority
from broker.security.password_file import read_password_file
from infra import host_secrets
from infra.local.lab_security import HTTP_USERS, USERS, cluster_acls
from infra.local.cloud_stand_ins import InstanceMetadataStandIn, SecretStoreStandIn, sigv4_signature
from infra.topology import load_topology

ENV = "samsa-test"
REGION = "us-east-2"
TERRAFORM_SECRETS = os.path.join(os.path.dirname(__file__), "..", "..", "infra", "terraform",
                                 "modules", "secrets", "main.tf")
TOPOLOGY = os.path.join(os.path.dirname(__file__), "..", "..", "infra", "local", "topology.toml")


def readable_by(service: str) -> list[str]:
    return cloud_helpers.readable_by(ENV, service)


@pytest.fixture
def secret_store(tmp_path):
    """The environment's secrets as module secrets makes them (an authority
    the operator put), and a key per service granted its readers'."""
    standin, passwords, _ = cloud_helpers.fill_secret_store(REGION, ENV, str(tmp_path / "operator"))
    with standin.serving() as endpoint:
        yield standin, endpoint, passwords


def run_fetch(endpoint: str, service: str, out, *extra: str, region: str = REGION,
              key: str | None = None) -> subprocess.CompletedProcess:
    key = key or service
    env = {**os.environ, "AWS_ENDPOINT_URL_SECRETS_MANAGER": endpoint,
           "AWS_ACCESS_KEY_ID": f"AKID{key.upper()}", "AWS_SECRET_ACCESS_KEY": f"secret-{key}",
           "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull,
           "AWS_SHARED_CREDENTIALS_FILE": os.devnull}
    return subprocess.run([sys.executable, "-m", "infra.host_secrets", "fetch",
                           "--service", service, "--environment", ENV, "--region", region,
                           "--out", str(out), *extra], env=env, capture_output=True,
                          text=True, timeout=60)


def test_the_readers_are_module_secrets_readers():
    # the Terraform module grants each service's role what READS fetches
    text = open(TERRAFORM_SECRETS).read()
    block = text[text.index("readers = {"):]
    block = block[:block.index("\n  }\n")]
    for service, reads in host_secrets.READS.items():
        line = re.search(rf"^\s*{service}\s*=\s*(.*?)(?=^\s*\w+\s*=|\Z)", block,
                         re.MULTILINE | re.DOTALL).group(1)
        named = set(re.findall(r'"([a-z-]+(?:/[a-z]+)?)"', line))
        assert {f"users/{u}" for u in reads.users} <= named | (
            {f"users/{u}" for u in USERS} if "every_user" in line else set()), service
        assert {f"zookeeper/{z}" for z in reads.zookeeper} <= named, service
        assert ("every_http_user" in line) == reads.http, service
        assert "ca" in named, service
        own_users = {n for n in named if n.startswith("users/")}
        assert own_users <= {f"users/{u}" for u in reads.users}, service


def test_a_broker_host_fetches_its_secrets_and_issues_its_certificate(secret_store, tmp_path):
    standin, endpoint, passwords = secret_store
    out = tmp_path / "security"
    done = run_fetch(endpoint, "broker", out, "--name", "broker-0", "--host", "10.10.1.17",
                     "--host", "broker-0.internal", "--options-out", str(tmp_path / "secured.env"))
    assert done.returncode == 0, done.stderr
    security = host_secrets.LabSecurity(str(out))
    for user in USERS:
        assert read_password_file(security.password_file(user)) == passwords[user]
    assert read_password_file(security.zookeeper_identity_file("cluster")) == \
        "samsa-cluster:zk-cluster"
    assert not os.path.exists(security.zookeeper_identity_file("mirror"))
    cert_path, key_path = security.cert_files("broker-0")
    cert = x509.load_pem_x509_certificate(open(cert_path, "rb").read())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(a) for a in names.get_values_for_type(x509.IPAddress)} == {"10.10.1.17"}
    assert names.get_values_for_type(x509.DNSName) == ["broker-0.internal"]
    # signed by the environment's authority (its certificate beside)
    ssl.create_default_context(cafile=security.ca_file).load_cert_chain(cert_path, key_path)
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(
        open(security.ca_file, "rb").read()))
    # every file the owner's alone; the authority's key not left behind
    for root, dirs, files in os.walk(out):
        for d in dirs:
            assert stat.S_IMODE(os.stat(os.path.join(root, d)).st_mode) == 0o700
        for f in files:
            if f.endswith(".key") or f.endswith(".password") or f.endswith(".zk"):
                assert stat.S_IMODE(os.stat(os.path.join(root, f)).st_mode) == 0o600
            assert "PRIVATE KEY" not in open(os.path.join(root, f)).read() or f.endswith(".key")
    users_file = open(security.http_users_file).read()
    assert all(f"http-{u}" not in users_file for u, _ in HTTP_USERS)   # hashes only
    options = open(tmp_path / "secured.env").read()
    assert options.startswith("SAMSA_SECURED_OPTIONS=--set tls_port=9092 --set port=9094 ")
    assert f"sasl_password_file={security.password_file('broker')}" in options
    assert "pw-broker" not in options
    # it asked only for what its role may read
    assert {name for _, name, answer in standin.requests} <= set(readable_by("broker"))
    assert all(answer == "ok" for _, _, answer in standin.requests)


@pytest.mark.parametrize("case", ["not granted", "authority not put", "wrong region",
                                  "wrong key"])
def test_a_secret_that_cannot_be_had_fails_the_boot_in_one_line(secret_store, tmp_path, case):
    standin, endpoint, _ = secret_store
    out = tmp_path / "security"
    args = ("--name", "mirror-0", "--host", "10.10.2.5")
    if case == "not granted":
        # the mirror's role asks for what only the brokers read
        standin.grant("AKIDMIRROR", "secret-mirror",
                      [n for n in readable_by("mirror") if n != f"{ENV}/users/mirror"])
        done, expected = run_fetch(endpoint, "mirror", out, *args), \
            f"secret {ENV}/users/mirror: AccessDeniedException"
    elif case == "authority not put":
        standin.put(f"{ENV}/ca", None)
        done, expected = run_fetch(endpoint, "mirror", out, *args), \
            f"secret {ENV}/ca: ResourceNotFoundException"
    elif case == "wrong region":
        done, expected = run_fetch(endpoint, "mirror", out, *args, region="eu-west-1"), \
            f"secret {ENV}/ca: InvalidSignatureException"
    else:
        standin.grant("AKIDMIRROR", "another-secret", readable_by("mirror"))
        done, expected = run_fetch(endpoint, "mirror", out, *args), \
            f"secret {ENV}/ca: InvalidSignatureException"
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], done.stderr
    if case == "authority not put":
        assert "python -m infra.cloud_secrets authority" in lines[0]
    # nothing half-written: no password file without its certificate
    assert not os.path.exists(out / "users" / "mirror.password")


def test_a_cloud_cluster_booted_from_the_store_runs_secured(secret_store, tmp_path,
                                                            broker_factory):
    standin, endpoint, passwords = secret_store
    # ZooKeeper's host: its certificate, TLS alone on its client port
    zk_dir = tmp_path / "zk-security"
    assert run_fetch(endpoint, "zookeeper", zk_dir, "--name", "zookeeper-1",
                     "--host", "127.0.0.1").returncode == 0
    zk_security = host_secrets.LabSecurity(str(zk_dir))
    ensemble = ZooKeeperEnsemble(1, str(tmp_path / "zookeeper"),
                                 tls=zk_security.zookeeper_server_tls("zookeeper-1"))
    ensemble.start()
    try:
        connect = ensemble.connect_string("/dc-a", tls=True)
        # the broker's host: secrets, users and ACLs, then the broker
        b_dir = tmp_path / "broker-security"
        env_file = tmp_path / "secured.env"
        done = run_fetch(endpoint, "broker", b_dir, "--name", "broker-0", "--host", "127.0.0.1",
                         "--options-out", str(env_file))
        assert done.returncode == 0, done.stderr
        acls = tmp_path / "acls.toml"
        acls.write_text(host_secrets.acls_toml(cluster_acls(load_topology(TOPOLOGY), "dc-a")))
        provision = [sys.executable, "-m", "infra.host_secrets", "provision", "--security",
                     str(b_dir), "--acls", str(acls), "--zookeeper", connect]
        first = subprocess.run(provision, capture_output=True, text=True, timeout=60)
        assert first.returncode == 0, first.stderr
        assert first.stdout.startswith(f"{len(USERS)} credentials written, ")
        again = subprocess.run(provision, capture_output=True, text=True, timeout=60)
        assert again.stdout.startswith("0 credentials written, 0 ACL entries added"), again
        # another ZooKeeper identity than the cluster's: refused, in one line
        stranger = tmp_path / "stranger-security"
        shutil.copytree(b_dir, stranger)
        (stranger / "zookeeper" / "cluster.zk").write_text("samsa-cluster:not-the-password\n")
        refused = subprocess.run([*provision[:5], str(stranger), *provision[6:]],
                                 capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2, refused
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert "NoAuthError" in refused.stderr

        words = env_file.read_text().split("=", 1)[1].split()
        settings = dict(w.split("=", 1) for w in words if w != "--set")
        settings.update({"tls_port": 0, "port": 0, "zookeeper": connect, "log.flush_ms": 10,
                         "metrics_http.tls_cert_file": "", "metrics_http.tls_key_file": ""})
        settings = {k: v for k, v in settings.items() if not k.startswith("metrics_http.")}
        broker = broker_factory(settings)
        b_security = host_secrets.LabSecurity(str(b_dir))
        client_dir = tmp_path / "producer-client"
        client_dir.mkdir(mode=0o700)
        (client_dir / "producer.password").write_text(passwords["producer"] + "\n")
        os.chmod(client_dir / "producer.password", 0o600)

        def produce(password_file: str) -> set[str]:
            """Send 50 messages as the producer: the errors of those that failed."""
            with ClusterProducer(connect, acks="flushed", zookeeper_tls=b_security.zookeeper_tls(),
                                 sasl_username="producer", sasl_password_file=password_file,
                                 tls=True, tls_ca_file=b_security.ca_file) as producer:
                sent = [producer.send("page-views", b"view-%d" % i) for i in range(50)]
                producer.flush(timeout=30)
            return {str(f.exception()) for f in sent if f.exception()}

        assert broker.tls_port
        assert produce(str(client_dir / "producer.password")) == set()

        # the users and ACLs are the cluster's: a stranger's ZooKeeper client
        # reads no credential; the cluster identity sees the producer's grant
        identity = Identity.from_file(b_security.zookeeper_identity_file("cluster"))
        zk = make_client(connect, identity=identity, tls=b_security.zookeeper_tls())
        start_client(zk, connect)
        try:
            assert store.list_users(zk) == sorted(USERS)
            assert any(e.principal == "User:producer" and e.operation == "write"
                       for e in store.list_acls(zk))
        finally:
            zk.stop()
            zk.close()

        # a rotation: the store's new password is written at the next boot,
        # and the old one no longer gets in
        standin.put(f"{ENV}/users/producer", "pw-producer-2")
        assert run_fetch(endpoint, "broker", b_dir, "--name", "broker-0",
                         "--host", "127.0.0.1").returncode == 0
        rotated = subprocess.run(provision, capture_output=True, text=True, timeout=60)
        assert rotated.stdout.startswith("1 credentials written, 0 ACL entries added"), rotated
        (failed,) = produce(str(client_dir / "producer.password"))
        assert "SASL_AUTHENTICATION_FAILED" in failed, failed
        (client_dir / "producer.password").write_text("pw-producer-2\n")
        assert produce(str(client_dir / "producer.password")) == set()
    finally:
        ensemble.stop()


def test_the_rendered_acls_read_back(tmp_path):
    entries = cluster_acls(load_topology(TOPOLOGY), "analysis")
    path = tmp_path / "acls.toml"
    path.write_text(host_secrets.acls_toml(entries))
    assert host_secrets.read_acls(str(path)) == entries
    path.write_text('[[acl]]\nprincipal = "User:x"\n')
    with pytest.raises(host_secrets.SecretError, match="a bad \\[\\[acl\\]\\] entry"):
        host_secrets.read_acls(str(path))


RENDERED = os.path.join(os.path.dirname(__file__), "..", "..", "infra", "terraform",
                        "environments", "production", "rendered")


@pytest.mark.parametrize("service", ["broker", "mirror", "audit"])
def test_each_services_secured_options_are_taken_by_its_command(secret_store, tmp_path,
                                                                 service):
    # the options a host's unit passes are settings the service's own command
    # takes (its --print-config: the effective settings, nothing started)
    _standin, endpoint, _ = secret_store
    out, env_file = tmp_path / "security", tmp_path / "secured.env"
    done = run_fetch(endpoint, service, out, "--name", f"{service}-0", "--host", "10.10.3.4",
                     "--options-out", str(env_file))
    assert done.returncode == 0, done.stderr
    options = env_file.read_text().removeprefix("SAMSA_SECURED_OPTIONS=").split()
    security = host_secrets.LabSecurity(str(out))
    if service == "broker":
        command = ["broker", "--config", os.path.join(RENDERED, "broker-dc-us-east.toml"),
                   "--set", "zookeeper=10.10.1.5:2181/dc-us-east"]
        expected = ['tls_port = 9092', 'port = 9094', 'authentication = "scram"',
                    'authorization = true', 'inter_broker_tls = true', 'zookeeper_tls = true',
                    f'sasl_password_file = "{security.password_file("broker")}"',
                    f'zookeeper_auth_file = "{security.zookeeper_identity_file("cluster")}"']
    elif service == "mirror":
        config = tmp_path / "mirror.toml"
        config.write_text(re.sub(r"\$\{zookeeper\.(\w+)\}", r"10.10.1.5:2181/\1",
                                 open(os.path.join(RENDERED, "mirror-to-analysis.toml")).read()))
        command = ["mirror", "--config", str(config)]
        expected = ['sasl_username = "mirror"', "tls = true", "zookeeper_tls = true",
                    f'zookeeper_auth_file = "{security.zookeeper_identity_file("mirror")}"',
                    f'users_file = "{security.http_users_file}"']
    else:
        command = ["audit", "serve", "--zookeeper", "10.10.1.5:2181/analysis"]
        expected = ['sasl_username = "audit"', "tls = true", "zookeeper_tls = true",
                    f'tls_cert_file = "{security.cert_files("audit-0")[0]}"',
                    f'users_file = "{security.http_users_file}"']
    printed = subprocess.run([sys.executable, "-m", *command, *options, "--print-config"],
                             capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0, printed.stderr
    lines = {line.strip() for line in printed.stdout.splitlines()}
    assert [e for e in expected if e not in lines] == [], printed.stdout


def test_a_zookeeper_host_gets_its_images_tls_settings(secret_store, tmp_path):
    _standin, endpoint, _ = secret_store
    out = tmp_path / "security"
    env_file = out / "zookeeper.env"
    done = run_fetch(endpoint, "zookeeper", out, "--name", "zookeeper-1", "--host", "10.10.1.5",
                     "--zookeeper-env-out", str(env_file))
    assert done.returncode == 0, done.stderr
    # docker run --env-file: KEY=value lines, the samsa/zookeeper image's settings
    values = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    key_store = str(out / "zookeeper.pem")
    assert values == {"ZOO_PORT": "2181", "ZOO_TLS_KEY_STORE": key_store,
                      "ZOO_TLS_TRUST_STORE": str(out / "ca" / "ca.crt"),
                      "ZOO_TLS_CLIENT_AUTH": "none", "ZOO_TLS_QUORUM": "true"}
    dockerfile = open(os.path.join(os.path.dirname(__file__), "..", "..", "infra", "docker",
                                   "zookeeper", "Dockerfile")).read()
    assert all(f"{key}=" in dockerfile for key in values)      # settings the image has
    held = open(key_store).read()
    assert "PRIVATE KEY" in held and "CERTIFICATE" in held
    assert stat.S_IMODE(os.stat(key_store).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(env_file).st_mode) == 0o600
    # the member's own users: none (it reads only the authority)
    assert not os.path.exists(out / "users") and not os.path.exists(out / "http")
    refused = run_fetch(endpoint, "broker", tmp_path / "b", "--name", "b", "--host", "10.0.0.1",
                        "--zookeeper-env-out", str(tmp_path / "z.env"))
    assert refused.returncode == 2 and "--zookeeper-env-out is for zookeeper, not broker" in \
        refused.stderr, refused


def test_the_analysis_stack_gets_the_warehouse_settings_its_dags_read(secret_store, tmp_path):
    from hadoop_loader.config import read_settings
    _standin, endpoint, passwords = secret_store
    out, extra = tmp_path / "security", tmp_path / "warehouse-secured.toml"
    done = run_fetch(endpoint, "analysis", out, "--name", "analysis-0", "--host", "10.10.9.4",
                     "--warehouse-out", str(extra))
    assert done.returncode == 0, done.stderr
    security = host_secrets.LabSecurity(str(out))
    # the file as the analysis stack's boot writes it: its own tables, then these lines
    config = tmp_path / "warehouse.toml"
    config.write_text('[loader]\nzookeeper = "10.10.9.5:2181/analysis"\noutput = "/tmp/w"\n'
                      '\n[warehouse]\naudit_url = "https://10.10.9.6:8090"\n' + extra.read_text())
    loader, warehouse = read_settings(str(config))
    assert loader.credentials.sasl_username == "loader" and loader.credentials.tls
    assert read_password_file(loader.credentials.sasl_password_file) == passwords["loader"]
    assert read_password_file(loader.credentials.zookeeper_auth_file) == \
        "samsa-loader:zk-loader"
    assert loader.credentials.zookeeper_tls
    assert warehouse.audit_username == "airflow"
    assert warehouse.audit_ca_file == security.ca_file
    assert read_password_file(warehouse.audit_password_file) == "http-airflow"
    assert stat.S_IMODE(os.stat(extra).st_mode) == 0o600
    # only the analysis stack's
    refused = run_fetch(endpoint, "mirror", tmp_path / "m", "--name", "m", "--host", "10.0.0.1",
                        "--warehouse-out", str(tmp_path / "x.toml"))
    assert refused.returncode == 2, refused
    assert "--warehouse-out is for analysis, not mirror" in refused.stderr
    assert not os.path.exists(tmp_path / "m")       # refused before anything is read


def test_a_secret_is_its_first_line_that_is_not_blank():
    assert host_secrets._first_line("\n  \npw-1\nrest\n") == "pw-1"
    assert host_secrets._first_line("\n \n") == ""


def test_an_output_files_existing_directory_keeps_its_mode(tmp_path):
    shared = tmp_path / "etc-samsa"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    host_secrets.write_private(str(shared / "secured.env"), "X=1\n")
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o755
    assert stat.S_IMODE(os.stat(shared / "secured.env").st_mode) == 0o600
    host_secrets.write_private(str(tmp_path / "new" / "f"), "x")
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o700


def test_the_stand_in_refuses_what_secrets_manager_refuses():
    standin = SecretStoreStandIn(REGION)
    standin.grant("AKID", "secret", [f"{ENV}/ca"])
    body = json.dumps({"SecretId": f"{ENV}/ca"}).encode()
    base = {"x-amz-target": "secretsmanager.GetSecretValue", "host": "h",
            "x-amz-date": "20261128T120000Z"}

    def signed(headers, names, secret="secret", date="20261128"):
        signature = sigv4_signature(secret, date, REGION, "secretsmanager", "POST", "/",
                               {n: headers.get(n, "") for n in names}, body)
        return {**headers, "authorization": (
            f"AWS4-HMAC-SHA256 Credential=AKID/{date}/{REGION}/secretsmanager/aws4_request, "
            f"SignedHeaders={';'.join(names)}, Signature={signature}")}

    standin.put(f"{ENV}/ca", "held")
    names = ["host", "x-amz-date", "x-amz-target"]
    assert standin.answer("POST", "/", signed(base, names), body)[0] == 200
    for headers, expected in (
            (signed(base, names, secret="other"), "does not match"),
            (signed({k: v for k, v in base.items() if k != "host"}, names), "missing"),
            (signed(base, ["x-amz-target"]), "not signed"),
            (signed(base, names, date="20261127"), "scope's date"),
            ({**base, "authorization": "Basic x"}, "no Signature Version 4")):
        status, answer = standin.answer("POST", "/", headers, body)
        assert status == 400 and expected in answer["message"], answer


def test_the_metadata_stand_in_answers_as_imdsv2():
    metadata = InstanceMetadataStandIn({"local-ipv4": "10.0.0.5"})
    assert metadata.answer("GET", "/latest/meta-data/local-ipv4", {})[0] == 401
    for ttl in ("", "0", "21601", "x"):
        assert metadata.answer("PUT", "/latest/api/token",
                               {"x-aws-ec2-metadata-token-ttl-seconds": ttl})[0] == 400
    status, token = metadata.answer("PUT", "/latest/api/token",
                                    {"x-aws-ec2-metadata-token-ttl-seconds": "60"})
    assert status == 200
    assert metadata.answer("GET", "/latest/meta-data/local-ipv4",
                           {"x-aws-ec2-metadata-token": token}) == (200, "10.0.0.5")
    assert metadata.answer("GET", "/latest/meta-data/placement/availability-zone",
                           {"x-aws-ec2-metadata-token": token})[0] == 404


def test_provision_without_a_zookeeper_fails_in_one_line(tmp_path):
    # a dead ZooKeeper (nothing listens): it waits --timeout, then says so
    security = tmp_path / "security"
    (security / "zookeeper").mkdir(parents=True)
    (security / "zookeeper" / "cluster.zk").write_text("samsa-cluster:pw\n")
    CertificateAuthority.create(str(security / "ca"))
    acls = tmp_path / "acls.toml"
    acls.write_text("")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = subprocess.run([sys.executable, "-m", "infra.host_secrets", "provision",
                           "--security", str(security), "--acls", str(acls),
                           "--zookeeper", f"127.0.0.1:{port}/dc-a", "--timeout", "2"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach ZooKeeper" in lines[0], done.stderr


def test_the_audit_host_keeps_its_database_credentials_as_rds_rotates_them(secret_store,
                                                                          tmp_path):
    # issue 31: RDS's master user secret (username and password, its user
    # the database's, not a name of ours) read into the file the audit reads
    # for every new connection, and read again so a rotation is taken
    import signal
    from broker_helpers import wait_until
    standin, endpoint, _ = secret_store
    arn = "arn:aws:secretsmanager:us-east-2:123456789012:secret:rds!db-1234-AbCdEf"
    standin.put(arn, json.dumps({"username": "audit", "password": "rds-pw-1"}))
    standin.grant("AKIDDB", "secret-db", [arn])
    out = tmp_path / "security" / "audit-db.json"
    env = {**os.environ, "AWS_ENDPOINT_URL_SECRETS_MANAGER": endpoint,
           "AWS_ACCESS_KEY_ID": "AKIDDB", "AWS_SECRET_ACCESS_KEY": "secret-db",
           "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull,
           "AWS_SHARED_CREDENTIALS_FILE": os.devnull}
    command = [sys.executable, "-m", "infra.host_secrets", "database", "--secret-id", arn,
               "--region", REGION, "--out", str(out)]
    once = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert once.returncode == 0, once.stderr
    assert json.loads(out.read_text()) == {"username": "audit", "password": "rds-pw-1"}
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600

    keeper = subprocess.Popen([*command, "--every", "0.2"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        standin.put(arn, json.dumps({"username": "audit", "password": "rds-pw-2"}))
        wait_until(lambda: "rds-pw-2" in out.read_text(), 30, what="the rotation to be taken")
        standin.put(arn, json.dumps({"username": "audit", "password": "rds-pw-3"}))
        wait_until(lambda: "rds-pw-3" in out.read_text(), 30, what="the next rotation")
        # a read that fails (the secret half-written, then unreadable): the
        # file is kept as it is, the keeper goes on, and takes the next value
        asked = len(standin.requests)
        standin.put(arn, "not json")
        wait_until(lambda: len(standin.requests) >= asked + 3, 30,
                   what="the keeper to read the bad value again and again")
        assert json.loads(out.read_text()) == {"username": "audit", "password": "rds-pw-3"}
        assert keeper.poll() is None
        standin.put(arn, json.dumps({"username": "audit", "password": "rds-pw-4"}))
        wait_until(lambda: "rds-pw-4" in out.read_text(), 30, what="the value after the bad one")
    finally:
        keeper.send_signal(signal.SIGTERM)
        _, err = keeper.communicate(timeout=30)
    assert keeper.returncode == 0, err
    assert "changed (rotated)" in err
    assert "the database credentials not read again (kept as they are)" in err and \
        "is not JSON" in err, err

    for value, words in (("not json", "is not JSON"),
                         (json.dumps({"username": "audit"}), "has no username and password")):
        standin.put(arn, value)
        bad = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad
        assert words in bad.stderr
    denied = subprocess.run([*command[:5], arn + "-other", *command[6:]], env=env,
                            capture_output=True, text=True, timeout=60)
    assert denied.returncode == 2 and "AccessDeniedException" in denied.stderr, denied


def test_a_database_url_gets_the_credentials_files_user_and_password_quoted(tmp_path):
    # Airflow's metadata database at each start of its components (the
    # samsa/analysis image's SAMSA_DB_CREDENTIALS_FILE): RDS's passwords may
    # hold characters a URL must quote
    from sqlalchemy.engine import make_url
    credentials = tmp_path / "database.json"
    credentials.write_text(json.dumps({"username": "airflow", "password": "p@ss/w:rd%?#"}))
    url = host_secrets.database_url(str(credentials),
                                    "postgresql+psycopg://db.internal:5432/airflow?sslmode=require")
    parsed = make_url(url)
    assert (parsed.username, parsed.password, parsed.host, parsed.port, parsed.database) == \
        ("airflow", "p@ss/w:rd%?#", "db.internal", 5432, "airflow")
    assert parsed.query == {"sslmode": "require"}
    printed = subprocess.run([sys.executable, "-m", "infra.host_secrets", "database-url",
                              "--credentials", str(credentials), "--url",
                              "postgresql+psycopg://db.internal:5432/airflow"],
                             capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0 and make_url(printed.stdout.strip()).password == "p@ss/w:rd%?#"
    with pytest.raises(host_secrets.SecretError, match="without a user"):
        host_secrets.database_url(str(credentials), "postgresql+psycopg://u:p@db/airflow")
    credentials.write_text("{}")
    with pytest.raises(host_secrets.SecretError, match="username"):
        host_secrets.database_url(str(credentials), "postgresql+psycopg://db/airflow")
