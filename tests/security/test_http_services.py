"""The HTTP services secured (issue 30, points 1 and 5): the schema registry
as its own process (``python -m schemas serve``) on HTTPS with a users file,
the lag service and the audit service with users; every way in that must
fail, fails, and a refused write leaves the registry as it was."""
from __future__ import annotations

import base64
import os
import json
import socket
import ssl
import sys
import urllib.error
import urllib.request

import pytest

from broker.security.ca import CertificateAuthority
from broker.service_kit import http_security as hs
from broker.service_kit.process import SupervisedProcess
from broker_helpers import run_module, wait_until

SERVING = rb"schema registry on (https://\S+)/"
PASSWORDS = {"reader": "read-secret", "admin": "admin-secret"}
SCHEMA = {"schema": json.dumps({"type": "record", "name": "Click", "fields": [
    {"name": "url", "type": "string"}]})}


def write_users(path, certificate_user: str | None = None) -> None:
    users = [hs.HttpUser("reader", "read", hs.hash_password(PASSWORDS["reader"], 10_000)),
             hs.HttpUser("admin", "admin", hs.hash_password(PASSWORDS["admin"], 10_000))]
    if certificate_user:
        users.append(hs.HttpUser(certificate_user, "read", hs.CERTIFICATE))
    hs.write_users_file(str(path), users)


def call(url: str, context: ssl.SSLContext | None = None, user: str | None = None,
         password: str | None = None, body: dict | None = None,
         method: str | None = None) -> tuple[int, dict, dict]:
    """(status, JSON answer, headers) of one request; HTTP errors answered too."""
    request = urllib.request.Request(
        url, data=None if body is None else json.dumps(body).encode(), method=method,
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    if user is not None:
        token = base64.b64encode(f"{user}:{password or PASSWORDS.get(user, '')}".encode())
        request.add_header("Authorization", f"Basic {token.decode()}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            return answer.status, json.loads(answer.read() or b"null"), dict(answer.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null"), dict(exc.headers)


@pytest.fixture
def pki(tmp_path):
    """A CA, the registry's certificate (127.0.0.1, localhost), a client
    certificate CN=prometheus,O=samsa and a stranger CA's client certificate."""
    ca = CertificateAuthority.create(str(tmp_path / "ca"))
    server = ca.issue("registry", ["127.0.0.1", "localhost"], str(tmp_path / "certs"))
    client = ca.issue("prometheus", [], str(tmp_path / "certs"), organization="samsa")
    stranger_ca = CertificateAuthority.create(str(tmp_path / "stranger-ca"), name="Stranger")
    stranger = stranger_ca.issue("prometheus", [], str(tmp_path / "stranger"),
                                 organization="samsa")
    return {"ca": ca, "server": server, "client": client, "stranger_ca": stranger_ca,
            "stranger": stranger}


def trusting(ca_file: str, cert: tuple[str, str] | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca_file)
    if cert:
        context.load_cert_chain(*cert)
    return context


@pytest.fixture
def secured_registry(tmp_path, pki):
    """``python -m schemas serve`` over a file store, HTTPS only, users
    reader (read), admin (admin) and the certificate CN=prometheus,O=samsa
    (read); returns (url, users file path, process)."""
    users = tmp_path / "http-users"
    write_users(users, certificate_user="CN=prometheus,O=samsa")
    config = tmp_path / "registry.toml"
    cert, key = pki["server"]
    config.write_text(f"""
[schema_registry]
registry = "file:{tmp_path / 'registry.json'}"
port = 0

[schema_registry.http]
tls_cert_file = "{cert}"
tls_key_file = "{key}"
tls_ca_file = "{pki['ca'].cert_path}"
tls_client_auth = "optional"
users_file = "{users}"
""")
    process = SupervisedProcess(
        "schema-registry", [sys.executable, "-m", "schemas", "serve", "--config", str(config)],
        str(tmp_path / "registry.log"))
    urls: list[str] = []

    def serving(line: bytes) -> bool:
        import re
        found = re.search(SERVING, line)
        if found:
            urls.append(found.group(1).decode())
        return found is not None

    process.start(ready_line=serving)
    process.wait_ready(30)
    try:
        yield urls[0], users, process
    finally:
        assert process.stop(10) == 0, process.tail_log()


def test_the_registry_over_https_refuses_every_way_in_that_must_fail(secured_registry, pki):
    url, users, process = secured_registry
    ca = trusting(pki["ca"].cert_path)
    port = int(url.rsplit(":", 1)[1])

    # plain HTTP to the HTTPS port: no answer
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/subjects", timeout=10)
    # a client that trusts another authority
    with pytest.raises(urllib.error.URLError) as refused:
        urllib.request.urlopen(f"{url}/subjects", timeout=10,
                               context=trusting(pki["stranger_ca"].cert_path))
    assert isinstance(refused.value.reason, ssl.SSLCertVerificationError)
    # a name the certificate does not carry
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with pytest.raises(ssl.SSLCertVerificationError, match="mismatch|match"):
            ca.wrap_socket(raw, server_hostname="registry.elsewhere.example")

    # no credentials, a wrong password, an unknown user: 401, and the same words
    status, answer, headers = call(f"{url}/subjects", ca)
    assert (status, answer) == (401, {"error": "authentication required"})
    assert headers["WWW-Authenticate"].startswith('Basic realm="samsa-schema-registry"')
    assert call(f"{url}/subjects", ca, "reader", "wrong")[:2] == \
        (401, {"error": "authentication failed"})
    assert call(f"{url}/subjects", ca, "nobody", "x")[:2] == \
        (401, {"error": "authentication failed"})
    malformed = urllib.request.Request(f"{url}/subjects",
                                       headers={"Authorization": "Basic !!!not-base64"})
    with pytest.raises(urllib.error.HTTPError) as bad:
        urllib.request.urlopen(malformed, timeout=10, context=ca)
    assert bad.value.code == 401

    # the read role reads, and may not write: refused, nothing registered
    assert call(f"{url}/subjects", ca, "reader")[:2] == (200, [])
    status, answer, _ = call(f"{url}/subjects/clicks-value/versions", ca, "reader",
                             body=SCHEMA)
    assert (status, answer) == (403, {"error": "the role read may not POST here"})
    assert call(f"{url}/subjects", ca, "admin")[:2] == (200, [])
    # the admin role writes
    status, answer, _ = call(f"{url}/subjects/clicks-value/versions", ca, "admin", body=SCHEMA)
    assert status == 200 and answer["id"] >= 1
    assert call(f"{url}/subjects", ca, "reader")[:2] == (200, ["clicks-value"])
    status, _, _ = call(f"{url}/subjects/clicks-value", ca, "reader", method="DELETE")
    assert status == 403
    assert call(f"{url}/subjects", ca, "reader")[:2] == (200, ["clicks-value"])

    # a client certificate of the CA is its subject's user, with no password;
    # the same subject from another authority is no one
    by_certificate = trusting(pki["ca"].cert_path, pki["client"])
    assert call(f"{url}/subjects", by_certificate)[:2] == (200, ["clicks-value"])
    assert call(f"{url}/subjects/other-value/versions", by_certificate, body=SCHEMA)[0] == 403
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        call(f"{url}/subjects", trusting(pki["ca"].cert_path, pki["stranger"]))

    # counted, and a scrape needs a user too
    status, _, _ = call(f"{url}/metrics", ca)
    assert status == 401
    request = urllib.request.Request(f"{url}/metrics", headers={
        "Authorization": "Basic " + base64.b64encode(b"reader:read-secret").decode()})
    with urllib.request.urlopen(request, timeout=10, context=ca) as answer:
        text = answer.read().decode()
    counts = {line.split("result=\"")[1].split("\"")[0]: float(line.rsplit(" ", 1)[1])
              for line in text.splitlines()
              if line.startswith("samsa_http_authentications_total{")}
    assert counts["failed"] >= 3 and counts["missing"] >= 2 and counts["forbidden"] >= 3
    assert counts["ok"] >= 6

    # a user removed from the file is refused without a restart
    out = run_module("broker.tools", "http-users", "remove", "reader", "--file", str(users))
    assert out.returncode == 0, out.stderr.decode()
    wait_until(lambda: call(f"{url}/subjects", ca, "reader")[0] == 401, 10, interval=0.2,
               what="the removed user to be refused")
    assert call(f"{url}/subjects", ca, "admin")[:2] == (200, ["clicks-value"])
    assert process.is_running()


def test_a_renewed_certificate_is_served_without_a_restart(secured_registry, pki, tmp_path):
    url, _, _ = secured_registry
    port = int(url.rsplit(":", 1)[1])

    def serial() -> int:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with trusting(pki["ca"].cert_path).wrap_socket(
                    raw, server_hostname="127.0.0.1") as tls:
                der = tls.getpeercert(binary_form=True)
        from cryptography import x509
        return x509.load_der_x509_certificate(der).serial_number

    before = serial()
    pki["ca"].issue("registry", ["127.0.0.1", "localhost"], str(tmp_path / "certs"))
    wait_until(lambda: serial() != before, 10, interval=0.2,
               what="the renewed certificate to be served")


def test_bad_http_settings_stop_the_start_with_a_clear_error(tmp_path, pki):
    users = tmp_path / "users"
    users.write_text(f"reader read {hs.hash_password('x', 10_000)}\nwriter writes x\n")
    out = run_module("schemas", "serve", "--set", f"registry=file:{tmp_path / 'r.json'}",
                     "--set", "port=0", "--set", f"http.users_file={users}", timeout=60)
    assert out.returncode == 2
    assert f"users file {users}, line 2: role 'writes' is not one of read, admin" in \
        out.stderr.decode()
    out = run_module("schemas", "serve", "--set", f"registry=file:{tmp_path / 'r.json'}",
                     "--set", "port=0", "--set", "http.tls_cert_file=/nonexistent.crt",
                     "--set", "http.tls_key_file=/nonexistent.key", timeout=60)
    assert out.returncode == 2
    assert "http: cannot use the TLS files /nonexistent.crt" in out.stderr.decode()
    out = run_module("schemas", "serve", "--set", f"registry=file:{tmp_path / 'r.json'}",
                     "--set", "http.tls_client_auth=required", timeout=60)
    assert out.returncode == 2
    assert "tls_client_auth needs TLS" in out.stderr.decode()


def test_the_lag_service_asks_for_users(zookeeper, zk_chroot, tmp_path):
    from broker.coordination.named_cluster import NamedCluster
    from broker.lag.config import LagServiceConfig
    from broker.lag.service import LagService

    users = tmp_path / "http-users"
    write_users(users)
    service = LagService(LagServiceConfig(
        clusters=(NamedCluster("dc-a", zookeeper.connect_string(zk_chroot)),), http_port=0,
        http=hs.HttpSecurity(users_file=str(users)))).start()
    try:
        url = f"http://127.0.0.1:{service.port}"
        assert call(f"{url}/v3/kafka", user=None)[0] == 401
        assert call(f"{url}/v3/kafka", user="reader", password="wrong")[0] == 401
        status, answer, _ = call(f"{url}/v3/kafka", user="reader")
        assert status == 200 and answer["clusters"] == ["dc-a"]
    finally:
        service.stop()


def test_the_audit_service_and_its_client_use_credentials(zookeeper, zk_chroot, tmp_path, pki):
    from audit.config import ServeConfig
    from audit.remote import AuditUnavailable, HttpCredentials, fetch_verdicts
    from audit.service import AuditService

    users = tmp_path / "http-users"
    write_users(users)
    cert, key = pki["server"]
    (tmp_path / "audit").mkdir()
    service = AuditService(ServeConfig(
        zookeeper=zookeeper.connect_string(zk_chroot), http_port=0,
        data_dir=str(tmp_path / "audit"),
        http=hs.HttpSecurity(tls_cert_file=cert, tls_key_file=key, users_file=str(users))))
    try:
        url = f"https://127.0.0.1:{service.serve_http()}"
        ca = trusting(pki["ca"].cert_path)
        assert call(f"{url}/api/verdicts?from=0&to=1", ca)[0] == 401
        password_file = tmp_path / "reader.pw"
        password_file.write_text(PASSWORDS["reader"] + "\n")
        credentials = HttpCredentials(ca_file=pki["ca"].cert_path, username="reader",
                                      password_file=str(password_file))
        answer = fetch_verdicts(url, 0, 3_600_000, credentials=credentials)
        assert answer["verdicts"] == []
        with pytest.raises(AuditUnavailable, match="HTTP 401"):
            fetch_verdicts(url, 0, 3_600_000, credentials=HttpCredentials(
                ca_file=pki["ca"].cert_path))
        with pytest.raises(AuditUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
            fetch_verdicts(url, 0, 3_600_000, credentials=HttpCredentials(
                username="reader", password_file=str(password_file)))
    finally:
        service.close()


def test_health_probes_need_no_user(zookeeper, zk_chroot, tmp_path):
    """A load balancer's probe of /healthz gets its answer; nothing else does."""
    from audit.config import ServeConfig
    from audit.service import AuditService

    users = tmp_path / "http-users"
    write_users(users)
    (tmp_path / "audit").mkdir()
    service = AuditService(ServeConfig(
        zookeeper=zookeeper.connect_string(zk_chroot), http_port=0,
        data_dir=str(tmp_path / "audit"), http=hs.HttpSecurity(users_file=str(users))))
    try:
        url = f"http://127.0.0.1:{service.serve_http()}"
        with urllib.request.urlopen(f"{url}/healthz", timeout=10) as answer:
            assert answer.read() == b"ok\n"
        assert call(f"{url}/healthz/../api/verdicts?from=0&to=1", user=None)[0] == 401
        assert call(f"{url}/api/verdicts?from=0&to=1", user=None)[0] == 401
        assert call(f"{url}/", user=None)[0] == 401
    finally:
        service.close()


def test_the_registry_clients_reach_a_secured_registry(secured_registry, pki, tmp_path):
    """``python -m schemas --registry https://USER@host:port``, its password
    from $SAMSA_SCHEMA_REGISTRY_PASSWORD_FILE and the authority from
    $SAMSA_SCHEMA_REGISTRY_CA_FILE, as Confluent's clients take them."""
    import os
    import subprocess
    url, _, _ = secured_registry
    netloc = url.removeprefix("https://")
    schema = tmp_path / "click.avsc"
    schema.write_text(SCHEMA["schema"])
    password_file = tmp_path / "admin.pw"
    password_file.write_text(PASSWORDS["admin"] + "\n")
    env = {**os.environ, "SAMSA_SCHEMA_REGISTRY_CA_FILE": pki["ca"].cert_path,
           "SAMSA_SCHEMA_REGISTRY_PASSWORD_FILE": str(password_file)}

    def schemas(*args: str, user: str = "admin", **extra: str):
        out = subprocess.run([sys.executable, "-m", "schemas", "--registry",
                              f"https://{user}@{netloc}", *args], capture_output=True,
                             env={**env, **extra}, timeout=60)
        return out.returncode, out.stdout.decode(), out.stderr.decode()

    code, _, err = schemas("register", "clicks", str(schema))
    assert code == 0, err
    code, out, err = schemas("list")
    assert code == 0 and out.split()[0] == "clicks", err
    # a wrong password, no authority: refused, and the messages show no secret
    wrong = tmp_path / "wrong.pw"
    wrong.write_text("nope\n")
    code, _, err = schemas("list", SAMSA_SCHEMA_REGISTRY_PASSWORD_FILE=str(wrong))
    assert code == 3 and "HTTP 401" in err and "authentication failed" in err, err
    assert "admin@" not in err and PASSWORDS["admin"] not in err
    code, _, err = schemas("list", SAMSA_SCHEMA_REGISTRY_CA_FILE="")
    assert code == 3 and "CERTIFICATE_VERIFY_FAILED" in err, err
    # the read role lists but may not register
    reader_pw = tmp_path / "reader.pw"
    reader_pw.write_text(PASSWORDS["reader"] + "\n")
    code, _, err = schemas("register", "other", str(schema), user="reader",
                           SAMSA_SCHEMA_REGISTRY_PASSWORD_FILE=str(reader_pw))
    assert code != 0 and "403" in err, err
    code, out, _ = schemas("list", user="reader",
                           SAMSA_SCHEMA_REGISTRY_PASSWORD_FILE=str(reader_pw))
    assert out.split()[0] == "clicks"


def test_the_warehouse_settings_give_the_dags_their_credentials(tmp_path):
    from audit.remote import HttpCredentials
    from hadoop_loader.config import WarehouseConfig
    from broker.service_kit.settings import ConfigError, load
    config = tmp_path / "warehouse.toml"
    config.write_text('[warehouse]\naudit_url = "https://audit:8090"\n'
                      'audit_ca_file = "/etc/samsa/ca.crt"\naudit_username = "dags"\n'
                      'audit_password_file = "/run/secrets/dags"\n')
    warehouse = load(WarehouseConfig, str(config), table="warehouse")
    assert warehouse.audit_credentials == HttpCredentials(
        "/etc/samsa/ca.crt", "dags", "/run/secrets/dags")
    with pytest.raises((ConfigError, ValueError), match="go together"):
        load(WarehouseConfig, str(config), {"audit_password_file": ""}, table="warehouse")


def test_the_audits_password_is_never_sent_over_plain_http(tmp_path):
    # a secured audit serves HTTPS alone: a DAG given its http:// URL with a
    # user would send the password in clear; it refuses before connecting
    from audit.remote import AuditUnavailable, HttpCredentials, fetch_verdicts
    password = tmp_path / "airflow.password"
    password.write_text("http-airflow\n")
    os.chmod(password, 0o600)
    with pytest.raises(AuditUnavailable, match="over plain HTTP"):
        fetch_verdicts("http://127.0.0.1:1", 0, 3_600_000, credentials=HttpCredentials(
            username="airflow", password_file=str(password)))
