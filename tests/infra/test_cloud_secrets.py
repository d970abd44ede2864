"""The cloud environment's authority (infra/cloud_secrets.py): made once as
the operator puts it in the secret store, and read back by a host that
issues its own certificate with it, which a client trusting only the
authority's certificate accepts over a real TLS connection."""
from __future__ import annotations

import json
import os
import socket
import ssl
import stat
import threading

import pytest
from cryptography import x509

from broker_helpers import run_module
from infra import cloud_secrets


def run(*args: str) -> tuple[int, str, str]:
    done = run_module("infra.cloud_secrets", *args)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def test_an_authority_is_made_once_and_put_as_the_secrets_hold_it(tmp_path):
    out = tmp_path / "ca"
    code, stdout, stderr = run("authority", "--environment", "samsa-test",
                               "--region", "us-east-2", "--out", str(out))
    assert code == 0, stderr
    held = json.loads((out / "ca.json").read_text())
    assert set(held) == {"certificate", "key"}
    assert held["certificate"] == (out / "ca.crt").read_text()
    assert stat.S_IMODE(os.stat(out / "ca.json").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o700
    cert = x509.load_pem_x509_certificate(held["certificate"].encode())
    assert cert.subject.rfc4514_string() == "CN=samsa-test CA"
    assert (f"aws secretsmanager put-secret-value --region us-east-2 --secret-id samsa-test/ca "
            f"--secret-string file://{out}/ca.json") in stdout
    assert (f"--region us-east-2 --secret-id samsa-test/ca-certificate "
            f"--secret-string file://{out}/ca.crt") in stdout
    assert not [p for p in os.listdir(out) if p not in ("ca.json", "ca.crt")]
    # never made again over one (a new authority is a new trust for every client)
    code, _, stderr = run("authority", "--environment", "x", "--region", "us-east-2",
                          "--out", str(out))
    assert code == 2 and "already holds an authority" in stderr
    assert json.loads((out / "ca.json").read_text()) == held


def test_a_host_issues_its_certificate_and_a_client_trusting_the_authority_takes_it(tmp_path):
    ca_json, ca_crt = cloud_secrets.make_authority("samsa-test", str(tmp_path / "ca"))
    tls = tmp_path / "tls"
    code, _, stderr = run("issue", "--authority", ca_json,
                                 "--name", "broker-0", "--host", "127.0.0.1",
                                 "--host", "broker-0.internal", "--out", str(tls))
    assert code == 0, stderr
    assert stat.S_IMODE(os.stat(tls / "broker-0.key").st_mode) == 0o600
    assert (tls / "ca.crt").read_text() == open(ca_crt).read()
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(tls / "broker-0.crt", tls / "broker-0.key")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with server_context.wrap_socket(conn, server_side=True) as tls_conn:
            tls_conn.sendall(b"hello")

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    client_context = ssl.create_default_context(cafile=ca_crt)   # the address is checked
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with client_context.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
            assert conn.recv(5) == b"hello"
    server.join(10)
    listener.close()


@pytest.mark.parametrize("content, says", [
    (None, "cannot read the authority"),
    ("not json", "is not the authority's JSON"),
    ('{"certificate": "x"}', "needs certificate and key"),
    ('{"certificate": "-----BEGIN CERTIFICATE-----\\nAAAA\\n-----END CERTIFICATE-----\\n",'
     ' "key": "-----BEGIN PRIVATE KEY-----\\nAAAA\\n-----END PRIVATE KEY-----\\n"}',
     "cannot issue with"),
])
def test_a_bad_authority_is_refused_in_one_line(tmp_path, content, says):
    path = tmp_path / "ca.json"
    if content is not None:
        path.write_text(content)
    code, stdout, stderr = run("issue", "--authority", str(path),
                                      "--name", "broker-0", "--host", "10.0.0.1",
                                      "--out", str(tmp_path / "tls"))
    assert code == 2, stdout + stderr
    assert says in stderr and "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1


def test_bad_names_hosts_days_and_directories_are_refused(tmp_path):
    ca_json, _ = cloud_secrets.make_authority("samsa-test", str(tmp_path / "ca"))
    tls = str(tmp_path / "tls")
    for name, hosts, days, says in (("broker-0", ["not a host"], 365, "bad host"),
                                    ("broker-0", ["*.internal"], 365, "bad host"),
                                    ("broker-0", [], 365, "at least one"),
                                    ("../escaped", ["10.0.0.1"], 365, "bad name"),
                                    ("broker-0", ["10.0.0.1"], 0, "1 or more")):
        with pytest.raises(cloud_secrets.AuthorityError, match=says):
            cloud_secrets.issue(ca_json, name, hosts, tls, days=days)
    assert not (tmp_path / "escaped.key").exists()
    # a directory others may read is not where an authority's key goes
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    code, _, stderr = run("authority", "--environment", "x", "--region", "us-east-2",
                          "--out", str(shared))
    assert code == 2 and "may be read by others" in stderr
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o755 and not os.listdir(shared)
    # a directory that cannot be made: one line, no traceback
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, stderr = run("issue", "--authority", ca_json, "--name", "b", "--host", "10.0.0.1",
                          "--out", str(blocker / "tls"))
    assert code == 2 and "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1
