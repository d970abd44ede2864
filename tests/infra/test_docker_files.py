"""The container images' sources (infra/docker/, issue 17), checked without a
Docker engine: every Dockerfile's COPY sources exist, the entrypoint scripts
parse as POSIX sh and are executable, every image gets the OCI labels, a
HEALTHCHECK and a non-root USER, and the engine helper reports an engine
that does not answer as absent (the image builds themselves: make images)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from infra.docker import engine
from infra.docker.images import CONTEXT_ITEMS, CONTEXTS, IMAGES, TEST_IMAGES

HERE = os.path.dirname(os.path.abspath(__file__))
DOCKER = os.path.join(os.path.dirname(os.path.dirname(HERE)), "infra", "docker")


@pytest.mark.parametrize("name", IMAGES)
def test_dockerfile_sources_labels_health_and_user(name):
    text = open(os.path.join(DOCKER, name, "Dockerfile")).read()
    for src in re.findall(r"^COPY (?!--from)(\S+)", text, re.M):
        if name in CONTEXTS and src in CONTEXT_ITEMS:
            continue                       # made by images.py into the build context
        assert os.path.exists(os.path.join(DOCKER, name, src)), src
    assert "HEALTHCHECK" in text
    users = re.findall(r"^USER (\S+)", text, re.M)
    if name in TEST_IMAGES:         # a cloud instance's stand-in: systemd first, as root
        assert users == [] and 'ENTRYPOINT ["/lib/systemd/systemd"]' in text
    else:
        assert users and users[-1] != "root"
    assert "--no-install-recommends" in text and "rm -rf /var/lib/apt/lists" in text


@pytest.mark.parametrize("script", ["zookeeper/entrypoint.sh", "postgres/entrypoint.sh",
                                    "samsa/entrypoint.sh", "analysis/entrypoint.sh"])
def test_entrypoints_parse_and_are_executable(script):
    path = os.path.join(DOCKER, script)
    assert os.access(path, os.X_OK)
    assert subprocess.run(["sh", "-n", path]).returncode == 0


def test_an_engine_that_does_not_answer_is_not_used(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nothing.sock")
    assert engine.existing_engine() is None
    monkeypatch.setenv("SAMSA_DOCKER_CACHE", str(tmp_path))
    assert engine.own_pid() is None


def test_a_stale_pid_file_never_names_another_program(monkeypatch, tmp_path):
    """A pid file left by a dockerd that died may name a pid another program
    reuses: engine.down() must not signal it (here: this test's own pid)."""
    monkeypatch.setenv("SAMSA_DOCKER_CACHE", str(tmp_path))
    (tmp_path / "dockerd.pid").write_text(str(os.getpid()))
    assert engine.own_pid() is None
    assert engine.down() is False


def test_images_lists_what_it_builds():
    out = subprocess.run([sys.executable, "-m", "infra.docker.images", "--list"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["samsa/base:bookworm"] + [f"samsa/{n}" for n in IMAGES]


@pytest.mark.parametrize("tls", [False, True])
def test_the_analysis_health_check_asks_the_api_server_as_it_serves(tmp_path, tls):
    """infra/docker/analysis/healthcheck.py against a real server on this
    host: plain HTTP, or HTTPS with a certificate of the authority Airflow is
    given that names another host (an instance's address): healthy; a server
    whose authority is not that one, or none: unhealthy."""
    import http.server
    import ssl
    import threading

    from broker.security.ca import CertificateAuthority

    class Healthy(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/api/v2/monitor/health" else 404)
            self.end_headers()

        def log_message(self, *_args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Healthy)
    env = {"PATH": os.environ["PATH"], "AIRFLOW__API__PORT": str(server.server_address[1])}
    if tls:
        ca = CertificateAuthority.create(str(tmp_path / "ca"))
        cert, key = ca.issue("analysis-0", ["10.20.3.4"], str(tmp_path / "certs"))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        stranger = CertificateAuthority.create(str(tmp_path / "stranger"))
        env.update({"AIRFLOW__API__SSL_CERT": cert, "AIRFLOW__API__SSL_KEY": key,
                    "AIRFLOW__API__SSL_CA_FILE": ca.cert_path})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    check = [sys.executable, os.path.join(DOCKER, "analysis", "healthcheck.py")]
    try:
        healthy = subprocess.run(check, env=env, capture_output=True, text=True, timeout=30)
        assert healthy.returncode == 0, healthy.stderr
        if tls:
            untrusted = subprocess.run(check, env={**env, "AIRFLOW__API__SSL_CA_FILE":
                                                   stranger.cert_path},
                                       capture_output=True, text=True, timeout=30)
            assert untrusted.returncode == 1
            assert "certificate verify failed" in untrusted.stderr, untrusted.stderr
    finally:
        server.shutdown()
        server.server_close()
    gone = subprocess.run(check, env=env, capture_output=True, text=True, timeout=30)
    assert gone.returncode == 1 and "unhealthy" in gone.stderr
